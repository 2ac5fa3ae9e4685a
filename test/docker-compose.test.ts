/**
 * docker-compose.yml, read as Docker Compose would read it (there is no `docker compose` here to run it):
 * what the README's Development section promises of `docker compose up`. An API instance and a worker on
 * Redis with AOF on a volume, both sharing GANTRY_SECRET_KEY, the data volume (output files included) and
 * REDIS_URL; the worker with `--role worker` and the public URL. The environment each Gantry service gets
 * (the image's ENV from the Dockerfile, then the service's) is run through Gantry's own config loader with
 * the config the image ships, so the test checks what Gantry would see in the container.
 */
import { readFileSync } from 'node:fs';
import { posix } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { parseConfig } from '../src/config/load.js';

const ROOT = new URL('..', import.meta.url).pathname;

interface Service {
  image?: string;
  build?: unknown;
  command?: string[];
  environment?: Record<string, string>;
  volumes?: string[];
  ports?: string[];
  depends_on?: string[];
  stop_grace_period?: string;
}

const compose = parse(readFileSync(`${ROOT}docker-compose.yml`, 'utf8')) as {
  services: Record<string, Service>;
  volumes?: Record<string, unknown>;
};
const services = compose.services;
const api = services.api as Service;
const worker = services.worker as Service;
const redis = services.redis as Service;

/** What the user exports before `docker compose up`, as the README's command does. */
const USER_ENV = { GANTRY_SECRET_KEY: 'a'.repeat(64), GANTRY_BOOTSTRAP_KEY: 'b'.repeat(64) };

/** Compose's interpolation of `${NAME}`, `${NAME:-default}` and `${NAME:?error}` (an unset name fails). */
function interpolate(value: string, vars: Record<string, string | undefined>): string {
  return value.replace(/\$\{(\w+)(?::([-?])([^}]*))?\}/g, (_all, name: string, op?: string, arg?: string) => {
    const set = vars[name];
    if (set) return set;
    if (op === '-') return arg ?? '';
    if (op === '?') throw new Error(`${name}: ${arg}`);
    return '';
  });
}

/** A service's environment as its container sees it: the image's ENV, then the service's, interpolated. */
function containerEnv(service: Service, vars: Record<string, string | undefined> = USER_ENV) {
  const dockerfile = readFileSync(`${ROOT}Dockerfile`, 'utf8');
  const image: Record<string, string> = {};
  // The ENV line(s) of the final stage: NAME=value pairs.
  const finalStage = dockerfile.slice(dockerfile.lastIndexOf('\nFROM '));
  for (const line of finalStage.split('\n').filter((l) => l.startsWith('ENV '))) {
    for (const [, name, value] of line.matchAll(/(\w+)=(\S+)/g)) image[name as string] = value as string;
  }
  const own = Object.fromEntries(
    Object.entries(service.environment ?? {}).map(([name, value]) => [
      name,
      interpolate(String(value), vars),
    ]),
  );
  return { ...image, ...own };
}

/** Gantry's configuration in the container: the image's config/gantry.yaml under the service's environment. */
function gantryConfig(service: Service) {
  return parseConfig(
    readFileSync(`${ROOT}config/gantry.yaml`, 'utf8'),
    'config/gantry.yaml',
    containerEnv(service),
  );
}

/** The named volume mounted at a container path, e.g. `gantry-data:/data` -> { volume, target }. */
function mounts(service: Service): Array<{ volume: string; target: string }> {
  return (service.volumes ?? []).map((spec) => {
    const [volume = '', target = ''] = spec.split(':');
    return { volume, target };
  });
}

/** The named volume whose mount holds `path` in the service's container. */
function volumeHolding(service: Service, path: string): string | undefined {
  return mounts(service).find(({ target }) => path === target || path.startsWith(`${target}/`))?.volume;
}

function seconds(duration: string | undefined): number {
  const match = /^(\d+)s$/.exec(duration ?? '');
  if (!match) throw new Error(`not a duration in seconds: ${duration}`);
  return Number(match[1]);
}

describe('docker-compose.yml', () => {
  it('has an API instance, a worker and Redis, the Gantry services built from the Dockerfile', () => {
    expect(Object.keys(services).sort()).toEqual(['api', 'redis', 'worker']);
    expect(api.build).toBe('.');
    expect(worker.build).toBe('.');
    expect(redis.image).toMatch(/^redis:/);
  });

  it('runs Redis with AOF on a named volume', () => {
    const command = redis.command ?? [];
    expect(command[0]).toBe('redis-server');
    const option = (name: string) => command[command.indexOf(name) + 1];
    expect(command).toContain('--appendonly');
    expect(option('--appendonly')).toBe('yes');
    expect(['everysec', 'always']).toContain(option('--appendfsync'));
    // BullMQ needs Redis to keep every key: noeviction, Redis' default, unless the command changes it.
    if (command.includes('--maxmemory-policy')) expect(option('--maxmemory-policy')).toBe('noeviction');
    // The redis image keeps its AOF under /data: that must be a volume, or a new container starts empty.
    const volume = volumeHolding(redis, '/data');
    expect(volume).toBeDefined();
    expect(Object.keys(compose.volumes ?? {})).toContain(volume);
  });

  it('starts the API with --role api and the worker with --role worker', () => {
    const role = (service: Service) => service.command?.slice(service.command.indexOf('--role') + 1)[0];
    expect(api.command).toEqual(expect.arrayContaining(['bin/gantry.js', 'serve', '--role']));
    expect(worker.command).toEqual(expect.arrayContaining(['bin/gantry.js', 'serve', '--role']));
    expect({ api: role(api), worker: role(worker) }).toEqual({ api: 'api', worker: 'worker' });
    expect(api.ports).toContain('8080:8080');
  });

  it('gives both the same Redis, the compose service, and the worker the API address for its links', () => {
    const apiConfig = gantryConfig(api);
    const workerConfig = gantryConfig(worker);
    expect(apiConfig.redisUrl).toBeDefined();
    expect(workerConfig.redisUrl).toBe(apiConfig.redisUrl);
    expect(new URL(apiConfig.redisUrl as string).hostname).toBe('redis');
    expect(api.depends_on).toContain('redis');
    expect(worker.depends_on).toContain('redis');
    expect(workerConfig.server.publicUrl).toBe('http://localhost:8080');
    expect(apiConfig.server.publicUrl).toBe(workerConfig.server.publicUrl);
    // GANTRY_PUBLIC_URL changes it for both.
    const moved = { ...USER_ENV, GANTRY_PUBLIC_URL: 'https://gantry.example' };
    expect(containerEnv(worker, moved).GANTRY_PUBLIC_URL).toBe('https://gantry.example');
    expect(containerEnv(api, moved).GANTRY_PUBLIC_URL).toBe('https://gantry.example');
  });

  it('shares GANTRY_SECRET_KEY, required of the user, and only the API makes the bootstrap key', () => {
    expect(containerEnv(api).GANTRY_SECRET_KEY).toBe(USER_ENV.GANTRY_SECRET_KEY);
    expect(containerEnv(worker).GANTRY_SECRET_KEY).toBe(USER_ENV.GANTRY_SECRET_KEY);
    for (const service of [api, worker]) {
      expect(() => containerEnv(service, { GANTRY_BOOTSTRAP_KEY: USER_ENV.GANTRY_BOOTSTRAP_KEY })).toThrow(
        /GANTRY_SECRET_KEY/,
      );
    }
    expect(containerEnv(api).GANTRY_BOOTSTRAP_KEY).toBe(USER_ENV.GANTRY_BOOTSTRAP_KEY);
    expect(worker.environment).not.toHaveProperty('GANTRY_BOOTSTRAP_KEY');
  });

  it('puts the output files of both on one named volume', () => {
    const apiFiles = gantryConfig(api).predictions.filesDir;
    const workerFiles = gantryConfig(worker).predictions.filesDir;
    expect(posix.isAbsolute(apiFiles)).toBe(true);
    expect(workerFiles).toBe(apiFiles);
    const volume = volumeHolding(api, apiFiles);
    expect(volume).toBeDefined();
    expect(volumeHolding(worker, workerFiles)).toBe(volume);
    expect(Object.keys(compose.volumes ?? {})).toContain(volume);
    expect(volume).not.toBe(volumeHolding(redis, '/data'));
  });

  it('gives each Gantry service more time to stop than its shutdown deadline', () => {
    for (const service of [api, worker]) {
      const deadline = gantryConfig(service).server.shutdownTimeoutMs / 1000;
      // Gantry exits about two seconds after its deadline (usage written, SQLite checkpointed).
      expect(seconds(service.stop_grace_period)).toBeGreaterThanOrEqual(deadline + 3);
    }
  });
});

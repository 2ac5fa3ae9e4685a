import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import Database from 'libsql';
import OpenAI from 'openai';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { removeTempDirs, tempDir } from './helpers/temp-dirs.js';

const ROOT = new URL('..', import.meta.url).pathname;
const children: ChildProcess[] = [];

// Runs the TypeScript entry directly; tsx is resolved from the repo, since the tests run in temp folders.
const TSX = pathToFileURL(join(ROOT, 'node_modules/tsx/dist/loader.mjs')).href;

function gantryArgs(args: string[]): string[] {
  return ['--import', TSX, join(ROOT, 'src/main.ts'), ...args];
}

/**
 * Runs `gantry ARGS` to completion in a temp folder (so ./config/gantry.yaml there does not exist). A
 * command that should fail but serves instead is stopped after 60 s (status null).
 */
function run(args: string[], env: NodeJS.ProcessEnv, cwd: string) {
  const res = spawnSync(process.execPath, gantryArgs(args), {
    cwd,
    env: { ...process.env, ...env },
    encoding: 'utf8',
    timeout: 60_000,
  });
  return { code: res.status, stdout: res.stdout, stderr: res.stderr };
}

/** Starts `gantry serve` and resolves with its printed address and first output once it listens. */
function serve(env: NodeJS.ProcessEnv, cwd: string): Promise<{ baseURL: string; output: string }> {
  const child = spawn(process.execPath, gantryArgs(['serve']), {
    cwd,
    env: { ...process.env, PORT: '0', LOG_LEVEL: 'warn', ...env },
  });
  children.push(child);
  return new Promise((resolve, reject) => {
    let output = '';
    child.stdout.on('data', (chunk: Buffer) => {
      output += chunk.toString();
      const match = /Gantry listening on (\S+)/.exec(output);
      if (match?.[1]) resolve({ baseURL: match[1], output });
    });
    child.stderr.on('data', (chunk: Buffer) => {
      output += chunk.toString();
    });
    child.on('exit', (code) => reject(new Error(`gantry exited with ${code}: ${output}`)));
  });
}

afterEach(() => {
  for (const child of children.splice(0)) child.kill('SIGTERM');
});
afterAll(removeTempDirs);

/** A command that failed: one line on stderr that names the problem, no stack, the exit code expected. */
function expectOneLineError(res: ReturnType<typeof run>, code: number, problem: RegExp): void {
  expect({ code: res.code, stderr: res.stderr }).toEqual({ code, stderr: expect.stringMatching(problem) });
  expect(res.stderr).toMatch(/^gantry: [^\n]+\n$/);
}

const CHOSEN_KEY = 'gty_chosen-by-script-0123456789abcdef';

// Each test spawns the CLI several times: a second or more apiece on a loaded machine.
describe('the gantry command', { timeout: 120_000 }, () => {
  it('serves the embedded default and prints a first key once', async () => {
    const cwd = tempDir('gantry-cli-');
    const dataDir = join(cwd, 'data');
    const first = await serve({ GANTRY_DATA_DIR: dataDir }, cwd);
    const key = /\n {2}(gty_\S+)\n/.exec(first.output)?.[1];
    expect(key).toBeDefined();
    const client = new OpenAI({ baseURL: first.baseURL, apiKey: key, maxRetries: 0 });
    const models = await client.models.list();
    expect(models.data.map((m) => m.id)).toEqual([
      'gantry/local-chat',
      'gantry/local-embed',
      'gantry/local-image',
      'gantry/local-speech',
      'gantry/local-video',
    ]);
    for (const child of children.splice(0)) {
      const exited = new Promise((r) => child.once('exit', r));
      child.kill('SIGTERM');
      await exited;
    }

    // A restart on the same data prints no new key, and the first key still works.
    const second = await serve({ GANTRY_DATA_DIR: dataDir }, cwd);
    expect(second.output).not.toMatch(/gty_/);
    const again = new OpenAI({ baseURL: second.baseURL, apiKey: key, maxRetries: 0 });
    expect((await again.models.list()).data.length).toBe(5);
  });

  it('uses GANTRY_BOOTSTRAP_KEY as the first key', async () => {
    const cwd = tempDir('gantry-cli-');
    const started = await serve(
      { GANTRY_DATA_DIR: join(cwd, 'data'), GANTRY_BOOTSTRAP_KEY: CHOSEN_KEY },
      cwd,
    );
    expect(started.output).not.toMatch(/gty_/);
    const client = new OpenAI({ baseURL: started.baseURL, apiKey: CHOSEN_KEY, maxRetries: 0 });
    expect((await client.models.list()).data.length).toBe(5);
  });

  it('creates, lists and revokes keys', () => {
    const cwd = tempDir('gantry-cli-');
    const env = { GANTRY_DATA_DIR: join(cwd, 'data') };
    const created = run(['keys', 'create', '--account', 'acme', '--name', 'ci'], env, cwd);
    expect(created.code).toBe(0);
    const key = created.stdout.trim();
    expect(key).toMatch(/^gty_[A-Za-z0-9_-]{40,}$/);
    // Only the hash is stored: the key's text is in no file of the data folder.
    const stored = readdirSync(env.GANTRY_DATA_DIR).map((f) =>
      readFileSync(join(env.GANTRY_DATA_DIR, f)).toString('latin1'),
    );
    expect(stored.join('').length).toBeGreaterThan(0);
    expect(stored.join('')).not.toContain(key);
    expect(stored.join('')).not.toContain(key.slice(10));
    const listed = run(['keys', 'list', '--account', 'acme'], env, cwd);
    expect(listed.stdout).toMatch(/\tacme\tci\tgty_.{6}…\tactive\tlast used never/);
    expect(listed.stdout).not.toContain(key);
    const id = listed.stdout.split('\t')[0] ?? '';
    expect(run(['keys', 'revoke', id], env, cwd).code).toBe(0);
    expect(run(['keys', 'list'], env, cwd).stdout).toMatch(/\trevoked /);
    expect(run(['keys', 'revoke', id], env, cwd).code).toBe(1);
  });

  it('config check accepts a good file and names the problem in a bad one', () => {
    const cwd = tempDir('gantry-cli-');
    const ok = run(['config', 'check'], {}, cwd);
    expect(ok.code).toBe(0);
    expect(ok.stdout).toMatch(/gantry\.yaml: ok \(1 providers, 5 models/);
    const bad = join(cwd, 'bad.yaml');
    writeFileSync(bad, 'providers:\n  up: { kind: openai }\n');
    const res = run(['config', 'check', '--config', bad], {}, cwd);
    expect(res.code).toBe(1);
    expect(res.stderr).toContain(`${bad}: /providers/up: must have required property 'base_url'`);
    const served = run(['serve', '--config', bad], {}, cwd);
    expect(served.code).toBe(1);
    expect(served.stderr).toMatch(/configuration error/);
  });

  it('refuses a GANTRY_BOOTSTRAP_KEY shorter than 32 characters, at start and in config check', () => {
    const cwd = tempDir('gantry-cli-');
    const env = { GANTRY_DATA_DIR: join(cwd, 'data'), GANTRY_BOOTSTRAP_KEY: 'secret123' };
    expectOneLineError(
      run(['serve', '--port', '0'], env, cwd),
      2,
      /GANTRY_BOOTSTRAP_KEY is too short \(9 characters\)/,
    );
    expectOneLineError(run(['config', 'check'], env, cwd), 1, /GANTRY_BOOTSTRAP_KEY is too short/);
    const spaced = { ...env, GANTRY_BOOTSTRAP_KEY: `${CHOSEN_KEY} x` };
    expectOneLineError(run(['config', 'check'], spaced, cwd), 1, /printable ASCII characters without spaces/);
    // Exactly 32 characters is enough; an empty value is the same as none.
    expect(run(['config', 'check'], { GANTRY_BOOTSTRAP_KEY: 'k'.repeat(32) }, cwd).code).toBe(0);
    expect(run(['config', 'check'], { GANTRY_BOOTSTRAP_KEY: '' }, cwd).code).toBe(0);
  });

  it('grants negative credits and prints an unlimited balance as unlimited', () => {
    const cwd = tempDir('gantry-cli-');
    const env = { GANTRY_DATA_DIR: join(cwd, 'data') };
    expect(run(['keys', 'create'], env, cwd).code).toBe(0);
    const balance = run(['credits', 'balance', '--account', 'default'], env, cwd);
    expect({ code: balance.code, stdout: balance.stdout }).toEqual({ code: 0, stdout: 'unlimited\n' });
    expect(run(['credits', 'grant', '--account', 'default', '--amount', '500'], env, cwd).stdout).toBe(
      '500\n',
    );
    const back = run(['credits', 'grant', '--account', 'default', '--amount', '-100'], env, cwd);
    expect({ code: back.code, stdout: back.stdout, stderr: back.stderr }).toEqual({
      code: 0,
      stdout: '400\n',
      stderr: '',
    });
    expect(run(['credits', 'grant', '--account', 'default', '--amount=-0.5'], env, cwd).stdout).toBe(
      '399.5\n',
    );
    expect(run(['credits', 'balance', '--account', 'default'], env, cwd).stdout).toBe('399.5\n');
  });

  it('reports every usage error in one line with a non-zero exit', () => {
    const cwd = tempDir('gantry-cli-');
    const env = { GANTRY_DATA_DIR: join(cwd, 'data') };
    expect(run(['keys', 'create'], env, cwd).code).toBe(0);
    // One of each way a command can fail: the option parser, a command's own check, an error thrown inside.
    const cases: [string[], number, RegExp][] = [
      [['serve', '--prot', '8080'], 2, /unknown option --prot/],
      [['credits', 'grant', '--account', 'default', '--amount'], 2, /--amount needs a value/],
      [['frobnicate'], 2, /unknown command "frobnicate"/],
      [['credits', 'balance'], 2, /credits balance needs --account NAME/],
      [['credits', 'grant', '--account', 'default', '--amount', '1e300'], 1, /credits out of range/],
    ];
    for (const [args, code, problem] of cases) expectOneLineError(run(args, env, cwd), code, problem);
  });

  it('refuses credits on a data dir an older Gantry left its ledger in, in one line naming the fix', () => {
    const cwd = tempDir('gantry-cli-');
    const dataDir = join(cwd, 'data');
    const env = { GANTRY_DATA_DIR: dataDir };
    expect(run(['keys', 'create'], env, cwd).code).toBe(0);
    // The credit table as Gantry before 0.2 kept it in the store file.
    const old = new Database(join(dataDir, 'gantry.db'));
    old.exec(
      'CREATE TABLE credit_balances (account_id TEXT PRIMARY KEY, balance_micros INTEGER, updated_at TEXT)',
    );
    old.close();
    for (const args of [
      ['credits', 'balance', '--account', 'default'],
      ['credits', 'grant', '--account', 'default', '--amount', '5'],
    ]) {
      const res = run(args, env, cwd);
      expectOneLineError(
        res,
        1,
        /credits are still in gantry\.db .*run `gantry serve` once .*then run this again/,
      );
      expect(res.stdout).toBe('');
    }
    // Left where it was: an older server may still be using it.
    const after = new Database(join(dataDir, 'gantry.db'));
    expect(after.prepare(`SELECT name FROM sqlite_master WHERE name = 'credit_balances'`).all()).toHaveLength(
      1,
    );
    after.close();
  });

  it('names a busy port in one line, and exits', async () => {
    const cwd = tempDir('gantry-cli-');
    const taken = createServer();
    await new Promise<void>((resolve) => taken.listen(0, '127.0.0.1', resolve));
    const port = (taken.address() as { port: number }).port;
    try {
      const res = run(['serve', '--port', String(port)], { GANTRY_DATA_DIR: join(cwd, 'data') }, cwd);
      expectOneLineError(res, 1, new RegExp(`cannot listen on 127\\.0\\.0\\.1:${port}: the port is in use`));
      expect(res.stdout).not.toContain('Gantry listening');
    } finally {
      taken.close();
    }
  });
});

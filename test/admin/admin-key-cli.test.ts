/**
 * `gantry admin-key create`: a new admin key printed once with the config line that accepts it; the line,
 * pasted under admin.keys, lets the key call the admin API under its name.
 */
import { afterEach, describe, expect, it, vi } from 'vitest';
import { hashKey } from '../../src/auth/keys.js';
import { runCli } from '../../src/cli.js';
import { LOCAL_CONFIG, startGantry, type TestGantry } from '../helpers/gantry.js';
import { restCall } from '../helpers/rest.js';

async function run(argv: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  let stdout = '';
  let stderr = '';
  const out = vi.spyOn(process.stdout, 'write').mockImplementation((chunk) => {
    stdout += String(chunk);
    return true;
  });
  const err = vi.spyOn(process.stderr, 'write').mockImplementation((chunk) => {
    stderr += String(chunk);
    return true;
  });
  try {
    return { code: await runCli(argv), stdout, stderr };
  } finally {
    out.mockRestore();
    err.mockRestore();
  }
}

describe('gantry admin-key create', () => {
  let gantry: TestGantry | undefined;
  afterEach(async () => {
    await gantry?.close();
    gantry = undefined;
  });

  it('prints a key and the config line that makes it an admin key of that name', async () => {
    const { code, stdout, stderr } = await run(['admin-key', 'create', '--name', 'ops']);
    expect(code, stderr).toBe(0);
    const [key, line] = stdout.trimEnd().split('\n') as [string, string];
    expect(key).toMatch(/^gta_[A-Za-z0-9_-]{43}$/);
    expect(line).toBe(`- { name: ops, sha256: ${hashKey(key)} }`);
    expect(stderr).toContain('shown once');
    expect(stderr).not.toContain(key);

    gantry = await startGantry(`${LOCAL_CONFIG}admin:\n  keys:\n    ${line}\n`);
    const admin = (body?: unknown) =>
      restCall<{ data?: unknown[]; id?: string }>(
        gantry?.origin as string,
        body ? 'POST' : 'GET',
        '/admin/v1/accounts',
        {
          key: null,
          headers: { authorization: `Bearer ${key}` },
          ...(body ? { body } : {}),
        },
      );
    expect((await admin()).status).toBe(200);
    expect((await admin({ name: 'made-by-ops' })).status).toBe(201);
    const audit = await restCall<{ data: Array<{ actor: string; action: string }> }>(
      gantry.origin,
      'GET',
      '/admin/v1/audit',
      { key: null, headers: { authorization: `Bearer ${key}` } },
    );
    expect(audit.body.data[0]).toMatchObject({ actor: 'admin:ops', action: 'account.create' });
  });

  it('makes a new key each time, named admin by default', async () => {
    const first = await run(['admin-key', 'create']);
    const second = await run(['admin-key', 'create']);
    expect(first.stdout).toMatch(/\n- \{ name: admin, sha256: [0-9a-f]{64} \}\n$/);
    expect(first.stdout.split('\n')[0]).not.toBe(second.stdout.split('\n')[0]);
  });

  it('refuses a name the config would not take, and a missing subcommand, in one line', async () => {
    for (const argv of [
      ['admin-key', 'create', '--name', 'two words'],
      ['admin-key', 'create', '--name', 'x'.repeat(65)],
      ['admin-key'],
    ]) {
      const { code, stdout, stderr } = await run(argv);
      expect(code).toBe(2);
      expect(stdout).toBe('');
      expect(stderr).toMatch(/^gantry: [^\n]+\n$/);
    }
  });
});

/**
 * Output downloads get the webhooks' SSRF guard: a backend must not make Gantry fetch a loopback or
 * private page and serve it to the caller, directly or through a redirect. Real HTTP servers on
 * 127.0.0.1; `files.example` stands for a public file host (exempt from the guard and resolved to
 * 127.0.0.1 by the injected resolver), `rebind.example` for a public name that resolves to loopback.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { BackendError } from '../../providers/predictions/types.js';
import { OutputDownloads } from '../../src/predictions/downloads.js';
import { type RecordingServer, startRecordingServer } from '../helpers/fake-server.js';

interface Behavior {
  /** Answer with a redirect to this URL instead of the file. */
  redirect?: string;
}

const PNG = Buffer.from('89504e470d0a1a0a', 'hex');

let secret: RecordingServer<Behavior>;
let files: RecordingServer<Behavior>;
let guarded: OutputDownloads;

async function fileServer(name: string, body: Buffer): Promise<RecordingServer<Behavior>> {
  return startRecordingServer<Behavior>(
    (ex) => {
      if (ex.behavior.redirect) {
        ex.res.writeHead(302, { location: ex.behavior.redirect });
        ex.res.end();
        return;
      }
      ex.res.writeHead(200, { 'content-type': 'image/png' });
      ex.res.end(body);
    },
    { name, behavior: {}, errorBody: (message) => ({ message }) },
  );
}

beforeAll(async () => {
  secret = await fileServer('loopback page', Buffer.from('internal admin page'));
  files = await fileServer('file host', PNG);
  guarded = new OutputDownloads({
    allowHosts: ['files.example'],
    resolve: async (host) =>
      host === 'files.example' || host === 'rebind.example' ? [{ address: '127.0.0.1', family: 4 }] : [],
  });
});
afterEach(() => {
  secret.reset();
  files.reset();
});
afterAll(async () => {
  await guarded?.close();
  await secret?.close();
  await files?.close();
});

async function refusal(promise: Promise<unknown>): Promise<BackendError> {
  const err = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(BackendError);
  expect((err as BackendError).retryable).toBe(false);
  return err as BackendError;
}

const publicUrl = () => `http://files.example:${files.port}/out/image.png`;

describe('OutputDownloads', () => {
  it('downloads from an allowed host', async () => {
    const file = await guarded.download(publicUrl(), {}, 0, false);
    expect(file).toEqual({ data: PNG, contentType: 'image/png', name: 'image.png' });
  });

  it('refuses loopback, private and internal names without connecting', async () => {
    for (const url of [
      `${secret.origin}/admin`,
      `http://localhost:${secret.port}/admin`,
      `http://[::1]:${secret.port}/admin`,
      'http://169.254.169.254/latest/meta-data/',
      'http://10.0.0.5/x.png',
      `http://rebind.example:${secret.port}/admin`,
    ]) {
      const err = await refusal(guarded.download(url, {}, 2, false));
      expect(err.message).toMatch(/^Could not download output 2: refused, /);
    }
    expect(secret.requests).toHaveLength(0);
  });

  it('refuses a redirect to a forbidden address, and never reaches it', async () => {
    for (const target of [`${secret.origin}/admin`, `http://rebind.example:${secret.port}/admin`]) {
      files.enqueue({ redirect: target });
      const err = await refusal(guarded.download(publicUrl(), {}, 0, false));
      expect(err.message).toMatch(/refused, .*(loopback|127\.0\.0\.1)/);
    }
    expect(files.requests).toHaveLength(2);
    expect(secret.requests).toHaveLength(0);
  });

  it('follows allowed redirects up to three, dropping the headers on another origin', async () => {
    files.enqueue({ redirect: '/hop1' }, { redirect: `http://files.example:${files.port}/hop2` });
    const file = await guarded.download(publicUrl(), { authorization: 'Token backend-secret' }, 0, false);
    expect(file.data).toEqual(PNG);
    expect(files.requests.map((r) => r.path)).toEqual(['/out/image.png', '/hop1', '/hop2']);
    // same origin (files.example:port) all along: the backend's header went to every hop
    expect(files.requests.every((r) => r.headers.authorization === 'Token backend-secret')).toBe(true);

    files.reset();
    files.enqueue({ redirect: `http://127.0.0.1:${files.port}/other-origin` });
    // allowPrivate exempts the first URL's origin only (the backend's own, README "Output files").
    const open = new OutputDownloads();
    try {
      await open.download(publicUrl().replace('files.example', '127.0.0.1'), { authorization: 'x' }, 0, true);
      files.reset();
      files.enqueue({ redirect: `http://localhost:${files.port}/other-origin` });
      const away = await refusal(
        open.download(`${files.origin}/a.png`, { authorization: 'Token backend-secret' }, 0, true),
      );
      expect(away.message).toBe('Could not download output 0: refused, host localhost is a loopback name');
      expect(files.requests.map((r) => r.path)).toEqual(['/a.png']);
    } finally {
      await open.close();
    }
    const exempt = new OutputDownloads({ allowHosts: ['localhost'] });
    try {
      files.reset();
      files.enqueue({ redirect: `http://localhost:${files.port}/other-origin` });
      await exempt.download(`${files.origin}/a.png`, { authorization: 'Token backend-secret' }, 0, true);
      expect(files.requests.map((r) => r.headers.authorization)).toEqual(['Token backend-secret', undefined]);
    } finally {
      await exempt.close();
    }

    files.reset();
    files.enqueue({ redirect: '/1' }, { redirect: '/2' }, { redirect: '/3' }, { redirect: '/4' });
    const err = await refusal(guarded.download(publicUrl(), {}, 0, false));
    expect(err.message).toContain('more than 3 redirects');
    expect(files.requests).toHaveLength(4);
  });

  it('downloads from loopback when the provider allows private outputs', async () => {
    const open = new OutputDownloads();
    try {
      const file = await open.download(`${secret.origin}/report.txt`, {}, 0, true);
      expect(file.data.toString()).toBe('internal admin page');
    } finally {
      await open.close();
    }
  });
});

/**
 * URL file inputs fetched by Gantry (src/predictions/input-fetch.ts): behind the downloads' SSRF guard,
 * size-limited while streaming, with a time limit. A real HTTP server on 127.0.0.1; `files.example`
 * stands for a public file host (exempt from the guard and resolved to 127.0.0.1 by the injected
 * resolver), `rebind.example` for a public name that resolves to loopback.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { BackendError } from '../../providers/predictions/types.js';
import { InputFetcher } from '../../src/predictions/input-fetch.js';
import { type RecordingServer, startRecordingServer, writePaced } from '../helpers/fake-server.js';

interface Behavior {
  redirect?: string;
  status?: number;
  /** Answer with this many 1000-byte pieces, without a content-length. */
  pieces?: number;
  /** Never answer. */
  hang?: boolean;
}

const PNG = Buffer.from('89504e470d0a1a0a0000000d49484452', 'hex');
const POLICY = { maxBytes: 2_500, allowPrivate: false };

let server: RecordingServer<Behavior>;
let fetcher: InputFetcher;

beforeAll(async () => {
  server = await startRecordingServer<Behavior>(
    async (ex) => {
      const { behavior } = ex;
      if (behavior.hang) return;
      if (behavior.redirect) {
        ex.res.writeHead(302, { location: behavior.redirect });
        ex.res.end();
        return;
      }
      if (behavior.pieces) {
        ex.res.writeHead(200, { 'content-type': 'application/octet-stream' });
        await writePaced(ex, new Array(behavior.pieces).fill('x'.repeat(1000)), { delayMs: 20 });
        return;
      }
      ex.res.writeHead(behavior.status ?? 200, { 'content-type': 'image/png; charset=binary' });
      ex.res.end(PNG);
    },
    { name: 'file host', behavior: {}, errorBody: (message) => ({ message }) },
  );
  let flips = 0;
  fetcher = new InputFetcher({
    allowHosts: ['files.example'],
    resolve: async (host) => {
      // `flip.example` is public when the URL is checked, loopback when the connection resolves it.
      if (host === 'flip.example')
        return [{ address: flips++ % 2 === 0 ? '93.184.216.34' : '127.0.0.1', family: 4 }];
      return host === 'files.example' || host === 'rebind.example'
        ? [{ address: '127.0.0.1', family: 4 }]
        : [];
    },
  });
});
afterEach(() => server.reset());
afterAll(async () => {
  await fetcher?.close();
  await server?.close();
});

const publicUrl = (path = '/cat.png') => `http://files.example:${server.port}${path}`;

async function failure(promise: Promise<unknown>): Promise<string> {
  const err = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(BackendError);
  expect((err as BackendError).retryable).toBe(false);
  return (err as Error).message;
}

describe('InputFetcher', () => {
  it('replaces URL file inputs (array items too) by data: URIs with the content type, other values kept', async () => {
    const input = {
      prompt: 'a cat',
      image: publicUrl(),
      images: ['data:text/plain;base64,aGk=', publicUrl('/b.png'), 3],
      mask: 'not a url',
    };
    const sent = await fetcher.inline(input, ['image', 'images', 'mask'], POLICY);
    const uri = `data:image/png;base64,${PNG.toString('base64')}`;
    expect(sent).toEqual({
      prompt: 'a cat',
      image: uri,
      images: ['data:text/plain;base64,aGk=', uri, 3],
      mask: 'not a url',
    });
    // The caller's input is left as it was (the prediction keeps the URLs).
    expect(input.image).toBe(publicUrl());
    expect(server.requests.map((r) => r.path)).toEqual(['/cat.png', '/b.png']);
  });

  it('leaves inputs that are not file inputs alone', async () => {
    const input = { prompt: publicUrl() };
    expect(await fetcher.inline(input, ['image'], POLICY)).toBe(input);
    expect(server.requests).toHaveLength(0);
  });

  it('refuses a name that resolves to loopback, and a literal loopback address, without connecting', async () => {
    const rebind = await failure(
      fetcher.inline({ image: `http://rebind.example:${server.port}/x.png` }, ['image'], POLICY),
    );
    expect(rebind).toBe(
      'Could not fetch input image: refused, host rebind.example resolves to loopback address 127.0.0.1',
    );
    const literal = await failure(fetcher.inline({ image: [`${server.origin}/x.png`] }, ['image'], POLICY));
    expect(literal).toBe('Could not fetch input image[0]: refused, address 127.0.0.1 is loopback');
    expect(server.requests).toHaveLength(0);
  });

  it('refuses at connect time a name that turned to loopback after the check (DNS rebinding)', async () => {
    const message = await failure(
      fetcher.inline({ image: `http://flip.example:${server.port}/x.png` }, ['image'], POLICY),
    );
    expect(message).toBe(
      'Could not fetch input image: refused, flip.example resolves to loopback address 127.0.0.1',
    );
    expect(server.requests).toHaveLength(0);
  });

  it('refuses a URL with credentials, in words that fit an input', async () => {
    const message = await failure(
      fetcher.inline({ image: `http://u:p@files.example:${server.port}/a.png` }, ['image'], POLICY),
    );
    expect(message).toBe('Could not fetch input image: refused, URL must not contain credentials');
  });

  it('refuses a redirect to a private address, and follows it when allow_private is on', async () => {
    server.enqueue({ redirect: `http://rebind.example:${server.port}/secret` });
    const message = await failure(fetcher.inline({ image: publicUrl() }, ['image'], POLICY));
    expect(message).toMatch(
      /^Could not fetch input image: refused, host rebind\.example resolves to loopback/,
    );
    expect(server.requests.map((r) => r.path)).toEqual(['/cat.png']);

    server.reset();
    server.enqueue({ redirect: `${server.origin}/moved.png` });
    const sent = await fetcher.inline({ image: publicUrl() }, ['image'], { ...POLICY, allowPrivate: true });
    expect(sent.image).toBe(`data:image/png;base64,${PNG.toString('base64')}`);
    expect(server.requests.map((r) => r.path)).toEqual(['/cat.png', '/moved.png']);
  });

  it('stops reading a body past max_input_file_bytes', async () => {
    server.setBehavior({ pieces: 50 });
    const started = Date.now();
    const message = await failure(fetcher.inline({ image: publicUrl('/big') }, ['image'], POLICY));
    expect(message).toBe('Could not fetch input image: the file is larger than the 2500 bytes allowed');
    // 50 pieces at 20 ms would take a second: the connection is dropped after the third.
    expect(await server.requests[0]?.settled).toBe('aborted');
    expect(Date.now() - started).toBeLessThan(900);
  });

  it('fails on an HTTP error, an unknown host and a timeout', async () => {
    server.setBehavior({ status: 404 });
    expect(await failure(fetcher.inline({ image: publicUrl() }, ['image'], POLICY))).toBe(
      'Could not fetch input image: HTTP 404',
    );
    expect(await failure(fetcher.inline({ image: 'http://nowhere.example/a.png' }, ['image'], POLICY))).toBe(
      'Could not fetch input image: refused, host nowhere.example does not resolve',
    );
    server.setBehavior({ hang: true });
    expect(
      await failure(fetcher.inline({ image: publicUrl() }, ['image'], { ...POLICY, timeoutMs: 300 })),
    ).toBe('Could not fetch input image: timed out after 300 ms');
  });

  it('a cancel aborts the fetch with its own reason, not as a fetch failure', async () => {
    server.setBehavior({ hang: true });
    const controller = new AbortController();
    const pending = fetcher.inline({ image: publicUrl() }, ['image'], POLICY, controller.signal);
    await server.waitForRequests(1);
    controller.abort(new Error('canceled'));
    const err = await pending.then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(Error);
    expect(err).not.toBeInstanceOf(BackendError);
  });
});

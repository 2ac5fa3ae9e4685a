import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { describe, expect, it } from 'vitest';
import { CogClient, MAX_REPLY_BYTES } from '../../providers/predictions/cog/client.js';
import { schemasFromCogOpenApi } from '../../providers/predictions/cog-openapi.js';
import {
  dataUriFile,
  extensionFor,
  lastPercentage,
  parseDataUri,
} from '../../providers/predictions/common.js';
import {
  isConcatenatedText,
  MAX_OUTPUT_DEPTH,
  MAX_OUTPUT_FILES,
  shapeOutput,
} from '../../providers/predictions/outputs.js';
import { MAX_ANSWER_BYTES, ReplicateBackend } from '../../providers/predictions/replicate.js';
import { BackendError, type BackendEvents } from '../../providers/predictions/types.js';
import { withLinks } from '../../src/predictions/serialize.js';
import { waitFor } from '../helpers/wait.js';

const noEvents: BackendEvents = {
  processing() {},
  log() {},
  progress() {},
  output() {},
};

const PNG_URI = 'data:image/png;base64,iVBORw0KGgo=';
const URI_LIST = { type: 'array', items: { type: 'string', format: 'uri' } };

describe('shapeOutput: outputs keep the shape the model produced', () => {
  it('keeps numbers, objects, lists of strings and scalars as JSON', () => {
    expect(shapeOutput([0.25, -0.5, 0.125], URI_LIST)).toEqual({ value: [0.25, -0.5, 0.125], files: [] });
    expect(
      shapeOutput(
        [
          { label: 'cat', score: 0.9 },
          { label: 'dog', score: 0.1 },
        ],
        undefined,
      ).value,
    ).toEqual([
      { label: 'cat', score: 0.9 },
      { label: 'dog', score: 0.1 },
    ]);
    expect(shapeOutput(['cat', 'dog'], { type: 'array', items: { type: 'string' } }).value).toEqual([
      'cat',
      'dog',
    ]);
    expect(shapeOutput(42, { type: 'integer' }).value).toBe(42);
    expect(shapeOutput(true, undefined).value).toBe(true);
    expect(shapeOutput(null, undefined)).toEqual({ value: null, files: [] });
    expect(shapeOutput(undefined, undefined)).toEqual({ value: null, files: [] });
  });

  it('joins text pieces only for Cog’s concatenated iterator', () => {
    const concatenated = {
      type: 'array',
      items: { type: 'string' },
      'x-cog-array-type': 'iterator',
      'x-cog-array-display': 'concatenate',
    };
    expect(isConcatenatedText(concatenated)).toBe(true);
    expect(shapeOutput(['Hel', 'lo'], concatenated)).toEqual({ value: 'Hello', files: [], text: true });
    // A plain iterator (no display hint) stays a list.
    const iterator = { type: 'array', items: { type: 'string' }, 'x-cog-array-type': 'iterator' };
    expect(isConcatenatedText(iterator)).toBe(false);
    expect(shapeOutput(['Hel', 'lo'], iterator).value).toEqual(['Hel', 'lo']);
  });

  it('takes files out of objects and nested lists, in order, leaving their places', () => {
    const schema = {
      type: 'object',
      properties: {
        images: { type: 'array', items: { type: 'string', format: 'uri' } },
        seed: { type: 'integer' },
        caption: { type: 'string' },
        nested: { type: 'object', properties: { mask: { type: 'string', format: 'uri' } } },
      },
    };
    const shaped = shapeOutput(
      {
        images: [PNG_URI, 'https://backend.internal/out/1.png'],
        seed: 1,
        caption: 'https://example.com/read-more',
        nested: { mask: 'https://backend.internal/out/mask.png' },
      },
      schema,
    );
    expect(shaped.value).toEqual({
      images: [null, null],
      seed: 1,
      caption: 'https://example.com/read-more',
      nested: { mask: null },
    });
    expect(shaped.files.map((f) => f.path)).toEqual([
      ['images', 0],
      ['images', 1],
      ['nested', 'mask'],
    ]);
    expect(shaped.files.map((f) => f.file.kind)).toEqual(['bytes', 'url', 'url']);
    expect(shaped.files[0]?.file).toMatchObject({ name: 'output_0.png', contentType: 'image/png' });
  });

  it('reads the places of files through Cog’s $refs (an output model) and anyOf', () => {
    const { output } = schemasFromCogOpenApi({
      components: {
        schemas: {
          Input: { type: 'object', properties: {} },
          Output: { $ref: '#/components/schemas/ModelOutput' },
          ModelOutput: {
            title: 'ModelOutput',
            type: 'object',
            properties: {
              file: { anyOf: [{ type: 'string', format: 'uri' }, { type: 'null' }] },
              text: { type: 'string' },
            },
          },
        },
      },
    });
    const shaped = shapeOutput({ file: 'https://b.internal/x.wav', text: 'https://b.internal/y' }, output);
    expect(shaped.value).toEqual({ file: null, text: 'https://b.internal/y' });
    expect(shaped.files).toEqual([
      { path: ['file'], file: { kind: 'url', url: 'https://b.internal/x.wav' } },
    ]);
  });

  it('treats a URL as a file where no schema speaks for its place only on the backend’s own origin', () => {
    const own = { ownUrl: (url: URL) => url.origin === 'https://b.internal' };
    // Another origin (an address the model echoed from the input, a metadata service) stays text.
    for (const echoed of ['http://10.0.0.5/', 'http://169.254.169.254/latest/meta-data/']) {
      expect(shapeOutput(echoed, undefined, own)).toEqual({ value: echoed, files: [] });
      expect(shapeOutput({ anything: echoed }, { type: 'object' }, own).files).toEqual([]);
    }
    expect(shapeOutput('https://b.internal/out.png', undefined).files).toEqual([]);
    const ownFile = shapeOutput({ anything: 'https://b.internal/out.png' }, { type: 'object' }, own);
    expect(ownFile.value).toEqual({ anything: null });
    expect(ownFile.files).toEqual([
      { path: ['anything'], file: { kind: 'url', url: 'https://b.internal/out.png', ownOrigin: true } },
    ]);
    // `format: uri` makes any URL a file, marked as the backend's own only on its origin.
    expect(shapeOutput('http://10.0.0.5/x.png', { type: 'string', format: 'uri' }, own).files).toEqual([
      { path: [], file: { kind: 'url', url: 'http://10.0.0.5/x.png' } },
    ]);
    // A plain string place is text even on the backend's origin.
    expect(shapeOutput('https://b.internal/read-more', { type: 'string' }, own).files).toEqual([]);
    expect(shapeOutput('plain words', undefined)).toEqual({ value: 'plain words', files: [] });
  });

  it('treats a data: URI as a file unless the schema says plain text, and a malformed one as text', () => {
    expect(shapeOutput(PNG_URI, undefined).files).toHaveLength(1);
    expect(shapeOutput(PNG_URI, { type: 'string', format: 'uri' }).files).toHaveLength(1);
    expect(shapeOutput([PNG_URI], URI_LIST).files).toHaveLength(1);
    const metrics = 'data: loss 0.25, accuracy 0.9';
    expect(shapeOutput(metrics, { type: 'string' })).toEqual({ value: metrics, files: [] });
    expect(shapeOutput(PNG_URI, { type: 'string' })).toEqual({ value: PNG_URI, files: [] });
    expect(shapeOutput(metrics, undefined)).toEqual({ value: metrics, files: [] });
    expect(shapeOutput([metrics], URI_LIST)).toEqual({ value: [metrics], files: [] });
  });

  it('keeps a `__proto__` key as data and never touches Object.prototype when links are written', () => {
    const raw = JSON.parse('{"__proto__":{"polluted":"data:image/png;base64,iVBORw0KGgo="},"seed":1}');
    const shaped = shapeOutput(raw, { type: 'object' });
    expect(Object.getPrototypeOf(shaped.value)).toBe(Object.prototype);
    expect(Object.hasOwn(shaped.value as object, '__proto__')).toBe(true);
    expect(shaped.files.map((f) => f.path)).toEqual([['__proto__', 'polluted']]);
    // Stored as JSON (the stores do) and served: the link lands in the output's own `__proto__` key.
    const stored = JSON.parse(JSON.stringify(shaped.value));
    const links = shaped.files.map((f, i) => ({ path: f.path, key: `p/${i}` }));
    const served = withLinks({ value: stored, links }, (key) => `https://gantry/files/${key}`);
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
    expect(JSON.parse(JSON.stringify(served))).toEqual(
      JSON.parse('{"__proto__":{"polluted":"https://gantry/files/p/0"},"seed":1}'),
    );
    // A stored path into a prototype (a record written before this fix) is not followed.
    withLinks({ value: { seed: 1 }, links: [{ path: ['__proto__', 'polluted'], key: 'k' }] }, () => 'x');
    withLinks(
      { value: [1], links: [{ path: ['constructor', 'prototype', 'polluted'], key: 'k' }] },
      () => 'x',
    );
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
    expect((Object.prototype as Record<string, unknown>).polluted).toBeUndefined();
  });

  it('copies only the lists and objects on a link’s path, leaving the stored output untouched', () => {
    const untouched = { big: [1, 2, 3], deep: { x: 1 } };
    const stored = {
      value: { files: [null, null], other: untouched },
      links: [] as Array<{ path: Array<string | number>; key: string }>,
    };
    stored.links.push({ path: ['files', 0], key: 'a' }, { path: ['files', 1], key: 'b' });
    const served = withLinks(stored, (key) => `L:${key}`) as typeof stored.value;
    expect(served).toEqual({ files: ['L:a', 'L:b'], other: untouched });
    expect(stored.value.files).toEqual([null, null]);
    expect(served.other).toBe(untouched);
    expect(withLinks({ value: null, links: [{ path: [], key: 'only' }] }, (k) => k)).toBe('only');
  });

  it('fails clearly on an output nested too deep or holding too many files', () => {
    let deep: unknown = 1;
    for (let i = 0; i < 20_000; i++) deep = [deep];
    expect(() => shapeOutput(deep, undefined)).toThrow(
      new RegExp(`output nests deeper than ${MAX_OUTPUT_DEPTH} levels`),
    );
    let ok: unknown = 1;
    for (let i = 0; i < MAX_OUTPUT_DEPTH; i++) ok = [ok];
    expect(shapeOutput(ok, undefined).value).toEqual(ok);
    const many = Array.from({ length: MAX_OUTPUT_FILES + 1 }, () => PNG_URI);
    expect(() => shapeOutput(many, URI_LIST)).toThrow(`the output holds more than ${MAX_OUTPUT_FILES} files`);
    expect(shapeOutput(many.slice(1), URI_LIST).files).toHaveLength(MAX_OUTPUT_FILES);
  });

  it('applies a backend’s text scrubbing and URL credentials', () => {
    const shaped = shapeOutput(['key sk-1 leaked', 'https://cdn/x.png'], URI_LIST, {
      text: (t) => t.replace('sk-1', '[redacted]'),
      urlFile: (url) => ({ kind: 'url', url, headers: { authorization: 'Bearer t' } }),
    });
    expect(shaped.value).toEqual(['key [redacted] leaked', null]);
    expect(shaped.files[0]?.file).toEqual({
      kind: 'url',
      url: 'https://cdn/x.png',
      headers: { authorization: 'Bearer t' },
    });
  });
});

describe('shared backend helpers', () => {
  it('names a JPEG .jpg, whatever spelling the type has, and unknown types .bin', () => {
    expect(extensionFor('image/jpeg')).toBe('jpg');
    expect(extensionFor('IMAGE/JPEG; charset=binary')).toBe('jpg');
    expect(dataUriFile('data:image/jpeg;base64,/9j/4AAQ', 3)).toMatchObject({ name: 'output_3.jpg' });
    expect(extensionFor('application/x-unknown')).toBe('bin');
  });

  it('parses base64 and percent-encoded data: URIs and refuses malformed ones', () => {
    expect(parseDataUri('data:text/plain,hi%20there')).toEqual({
      data: Buffer.from('hi there'),
      contentType: 'text/plain',
    });
    expect(parseDataUri('data:;base64,aGk=')).toEqual({ data: Buffer.from('hi'), contentType: 'text/plain' });
    expect(parseDataUri('data:image/png;base64')).toBeUndefined();
    expect(parseDataUri('https://x')).toBeUndefined();
  });

  it('reads the last percentage of tqdm bars and progress lines, nothing else', () => {
    expect(lastPercentage(' 45%|████▌     | 45/100 [00:02<00:02]\r 46%|████▌     | 46/100')).toBe(46);
    expect(lastPercentage('progress: 12.5%\n')).toBe(12.5);
    expect(lastPercentage('using 50% of VRAM')).toBeUndefined();
  });
});

/** A real server answering every request with a JSON body that never ends; `closed` once a client hung up. */
async function endlessServer() {
  const state = { closed: false };
  const server = createServer((_req, res) => {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.on('close', () => {
      state.closed = true;
    });
    const chunk = Buffer.alloc(1024 * 1024, 'a');
    res.write('{"id":"p1","status":"succeeded","output":"');
    const more = (): void => {
      while (!res.destroyed && res.write(chunk));
      if (!res.destroyed) res.once('drain', more);
    };
    more();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    origin: `http://127.0.0.1:${port}`,
    state,
    close: () => {
      server.closeAllConnections();
      return new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

async function rejectionOf(promise: Promise<unknown>): Promise<BackendError> {
  const error = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(BackendError);
  return error as BackendError;
}

describe('a backend’s answer is bounded', () => {
  it('a Cog server’s: refused past MAX_REPLY_BYTES, clearly and without a retry, the connection dropped', async () => {
    const server = await endlessServer();
    const client = new CogClient(server.origin, 1);
    try {
      const error = await rejectionOf(
        client.send('POST', '/predictions', {}, { signal: new AbortController().signal, waitForModel: true }),
      );
      expect(error.message).toBe(`the Cog server's answer is larger than ${MAX_REPLY_BYTES} bytes`);
      expect(error.retryable).toBe(false);
      await waitFor('the server to see the connection dropped', () => server.state.closed || undefined);
    } finally {
      await client.close();
      await server.close();
    }
  });

  it('a partner API’s: refused past MAX_ANSWER_BYTES, clearly and without a retry', async () => {
    const server = await endlessServer();
    const backend = new ReplicateBackend({
      name: 'replicate',
      kind: 'replicate',
      baseUrl: server.origin,
      timeoutMs: 10_000,
      pollIntervalMs: 20,
    });
    try {
      const error = await rejectionOf(
        backend.run(
          {
            predictionId: '7d5e4b8a-3c2f-4a1b-9e8d-1f2a3b4c5d6e',
            model: 'acme/model',
            input: { prompt: 'x', replicate_api_key: 'r8_caller_token_0123456789' },
            stream: false,
          },
          { signal: new AbortController().signal, events: noEvents },
        ),
      );
      expect(error.message).toBe(`replicate's answer is larger than ${MAX_ANSWER_BYTES} bytes`);
      expect(error.retryable).toBe(false);
      await waitFor('the server to see the connection dropped', () => server.state.closed || undefined);
    } finally {
      await backend.close();
      await server.close();
    }
  });
});

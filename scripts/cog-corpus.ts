/**
 * `npm run cog:corpus -- <dir> [--json]`: runs a directory of Cog OpenAPI documents and example inputs
 * through a real Gantry (in this process) in front of fake Cog servers (one per model, in this script),
 * and prints what Gantry accepted, what it refused and whether that is what Python Cog would do, and
 * whether each output kept its shape with its files turned into Gantry links. Exits 1 on any false
 * rejection, false acceptance, input sent differently than expected (a URL file input reaching the
 * backend unfetched included), output-shape mismatch, or model served/offline against expectation.
 *
 * Layout (README.md, Predictions, "Checking a corpus of Cog models"):
 *   <dir>/<model>/openapi.json        what the model's Cog server serves at GET /openapi.json
 *   <dir>/<model>/model.json          optional: {"unknown_inputs": "drop"} and/or {"expect": "offline"}
 *   <dir>/<model>/examples/<name>.json
 *     {"input": {...}, "cog": "accepts" | "refuses"   optional, "accepts" when left out (a published
 *                                                    example is one the model ran),
 *      "sent": {...}          optional: the input the backend must receive (after conversions/defaults)
 *      "fields": ["seed"]     with "refuses": the fields the refusal must name
 *      "unknown": ["foo"]     with "accepts": inputs Python Cog drops and Gantry refuses by choice}
 *
 * Gantry fetches URL file inputs itself and sends the backend data: URIs (README.md, "File inputs"), so
 * the http(s) URLs of the examples are served by a local file host (no network needed) whose file says
 * which URL it stands for; what the fake Cog receives is mapped back to the example's URLs before it is
 * compared with "sent".
 */

import { randomBytes } from 'node:crypto';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join, resolve } from 'node:path';
import { isDeepStrictEqual } from 'node:util';
import { schemasFromCogOpenApi } from '../providers/predictions/cog-openapi.js';
import { buildApp } from '../src/app.js';
import { syncAccounts } from '../src/bootstrap.js';
import { parseConfig } from '../src/config/load.js';
import { SqliteStore } from '../src/store/sqlite.js';

type Json = Record<string, unknown>;

interface Example {
  name: string;
  input: Json;
  /** What Python Cog does with the input; an unlabelled example is one Cog accepts. */
  cog?: 'accepts' | 'refuses';
  sent?: Json;
  fields?: string[];
  unknown?: string[];
}

interface CorpusModel {
  name: string;
  doc: Json;
  options: { unknown_inputs?: 'refuse' | 'drop'; expect?: 'offline' | 'served' };
  examples: Example[];
}

/** One line of the report. */
export interface CorpusResult {
  model: string;
  example: string;
  verdict:
    | 'accepted'
    | 'refused'
    | 'refused-unknown'
    | 'false-rejection'
    | 'false-acceptance'
    | 'sent-mismatch'
    | 'output-mismatch'
    | 'offline-mismatch';
  reason?: string;
}

export interface CorpusReport {
  models: number;
  examples: number;
  /** Examples Python Cog accepts (unknown fields aside) that Gantry accepted, over all of them. */
  acceptance: number;
  results: CorpusResult[];
}

/** A 1×1 PNG: what a fake model returns for a file output (Cog encodes files as data: URIs). */
const PNG_DATA_URI =
  'data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==';

function readCorpus(dir: string): CorpusModel[] {
  const models: CorpusModel[] = [];
  for (const name of readdirSync(dir).sort()) {
    const base = join(dir, name);
    if (!existsSync(join(base, 'openapi.json'))) continue;
    const doc = JSON.parse(readFileSync(join(base, 'openapi.json'), 'utf8')) as Json;
    const options = existsSync(join(base, 'model.json'))
      ? (JSON.parse(readFileSync(join(base, 'model.json'), 'utf8')) as CorpusModel['options'])
      : {};
    const examplesDir = join(base, 'examples');
    const examples: Example[] = existsSync(examplesDir)
      ? readdirSync(examplesDir)
          .filter((f) => f.endsWith('.json'))
          .sort()
          .map((f) => ({
            name: f.replace(/\.json$/, ''),
            ...(JSON.parse(readFileSync(join(examplesDir, f), 'utf8')) as Omit<Example, 'name'>),
          }))
      : [];
    models.push({ name, doc, options, examples });
  }
  return models;
}

/** The Output schema with its `$ref`s inlined as Gantry inlines them; {} when it has none usable. */
function outputSchemaOf(doc: Json): Json {
  try {
    return schemasFromCogOpenApi(doc).output;
  } catch {
    return {};
  }
}

/** What the fake model returns for an Output schema: files as data: URIs, numbers, text pieces. */
function sampleOutput(schema: Json): unknown {
  // Optional[X] and other unions: a value of the first member that is not null.
  for (const keyword of ['allOf', 'anyOf', 'oneOf'] as const) {
    const members = schema[keyword];
    if (!Array.isArray(members)) continue;
    const member = (members as Json[]).find((m) => m && m.type !== 'null');
    if (member) {
      const { [keyword]: _members, ...rest } = schema;
      return sampleOutput({ ...rest, ...member });
    }
  }
  if (Array.isArray(schema.enum) && schema.enum.length > 0) return schema.enum[0];
  if (schema.type === 'array') {
    const items = (schema.items ?? {}) as Json;
    if (schema['x-cog-array-display'] === 'concatenate') return ['Hel', 'lo', '!'];
    return [sampleOutput(items), sampleOutput(items)];
  }
  if (schema.type === 'string') return schema.format === 'uri' ? PNG_DATA_URI : 'text';
  if (schema.type === 'number') return 0.25;
  if (schema.type === 'integer') return 3;
  if (schema.type === 'boolean') return true;
  if (schema.type === 'object' && typeof schema.properties === 'object' && schema.properties) {
    return Object.fromEntries(
      Object.entries(schema.properties as Json).map(([k, v]) => [k, sampleOutput(v as Json)]),
    );
  }
  return 'text';
}

/** The output a client should get for `sampled`: concatenated text joined, everything else as it is. */
function expectedOutput(schema: Json, sampled: unknown): unknown {
  if (schema['x-cog-array-display'] === 'concatenate' && Array.isArray(sampled)) return sampled.join('');
  return sampled;
}

/**
 * The JSON shape of a value: its types, array lengths and object keys, strings as `string`, and as
 * `file` the strings `isFile` says are files (the fake's data: URIs in what it returned; Gantry's signed
 * links in what the client got, so a data: URI left in place is a mismatch).
 */
function shapeOf(value: unknown, isFile: (s: string) => boolean): unknown {
  if (typeof value === 'string') return isFile(value) ? 'file' : 'string';
  if (Array.isArray(value)) return value.map((v) => shapeOf(v, isFile));
  if (value !== null && typeof value === 'object')
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, shapeOf(v, isFile)]));
  return value === null ? 'null' : typeof value;
}

interface FileHost {
  origin: string;
  /** The example's http(s) URLs (top level, array items, nested) pointed at this host. */
  localise(value: unknown): unknown;
  /** What the backend received with this host's URLs and files (as data: URIs) put back as the URLs. */
  restore(value: unknown): unknown;
  close(): Promise<void>;
}

const FILE_MARK = 'cog-corpus file for ';

/** Serves, for `/<encoded URL>`, a file whose text names that URL. */
async function startFileHost(): Promise<FileHost> {
  const server: Server = createServer((req, res) => {
    const original = decodeURIComponent((req.url ?? '/').slice(1));
    res.writeHead(200, { 'content-type': 'application/octet-stream' });
    res.end(FILE_MARK + original);
  });
  await new Promise<void>((done) => server.listen(0, '127.0.0.1', done));
  const origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const map = (value: unknown, f: (s: string) => string): unknown => {
    if (typeof value === 'string') return f(value);
    if (Array.isArray(value)) return value.map((v) => map(v, f));
    if (value !== null && typeof value === 'object')
      return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, map(v, f)]));
    return value;
  };
  const fromDataUri = (text: string): string | null => {
    const match = /^data:[^,]*;base64,(.*)$/s.exec(text);
    const decoded = match ? Buffer.from(match[1] ?? '', 'base64').toString('utf8') : '';
    return decoded.startsWith(FILE_MARK) ? decoded.slice(FILE_MARK.length) : null;
  };
  return {
    origin,
    localise: (value) =>
      map(value, (t) => (/^https?:\/\//i.test(t) ? `${origin}/${encodeURIComponent(t)}` : t)),
    restore: (value) =>
      map(value, (t) =>
        t.startsWith(`${origin}/`) ? decodeURIComponent(t.slice(origin.length + 1)) : (fromDataUri(t) ?? t),
      ),
    close: () => new Promise<void>((done) => server.close(() => done())),
  };
}

interface FakeCogServer {
  origin: string;
  received: Json[];
  close(): Promise<void>;
}

/** A Cog server as python/cog/server/http.py answers a synchronous prediction. */
async function startFakeCog(doc: Json): Promise<FakeCogServer> {
  const received: Json[] = [];
  const output = sampleOutput(outputSchemaOf(doc));
  const send = (res: ServerResponse, status: number, body: unknown) => {
    res.writeHead(status, { 'content-type': 'application/json' });
    res.end(JSON.stringify(body));
  };
  const server: Server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const url = req.url ?? '/';
      if (req.method === 'GET' && url === '/openapi.json') return send(res, 200, doc);
      if (req.method === 'GET' && url === '/health-check')
        return send(res, 200, { status: 'READY', setup: { status: 'succeeded' } });
      const match = /^\/predictions(?:\/([^/]+))?$/.exec(url);
      if (match && (req.method === 'PUT' || req.method === 'POST')) {
        const body = JSON.parse(Buffer.concat(chunks).toString('utf8') || '{}') as Json;
        received.push((body.input ?? {}) as Json);
        const now = new Date().toISOString();
        return send(res, 200, {
          id: match[1] ?? body.id ?? null,
          input: body.input,
          output,
          status: 'succeeded',
          logs: '',
          error: null,
          created_at: now,
          started_at: now,
          completed_at: now,
          metrics: { predict_time: 0.01 },
        });
      }
      if (match === null && /\/cancel$/.test(url)) return send(res, 200, {});
      send(res, 404, { detail: 'Not Found' });
    });
  });
  await new Promise<void>((done) => server.listen(0, '127.0.0.1', done));
  const { port } = server.address() as AddressInfo;
  return {
    origin: `http://127.0.0.1:${port}`,
    received,
    close: () => new Promise<void>((done) => server.close(() => done())),
  };
}

/** Runs the corpus in `dir`; the report says what happened to every example. */
export async function runCorpus(dir: string): Promise<CorpusReport> {
  const models = readCorpus(resolve(dir));
  const fakes = await Promise.all(models.map((m) => startFakeCog(m.doc)));
  const files = await startFileHost();
  const key = `gty_${randomBytes(32).toString('base64url')}`;
  const yaml = [
    'providers:',
    ...models.map((_, i) => `  cog${i}: { kind: cog, base_url: "${fakes[i]?.origin}" }`),
    'tiers:',
    '  default: {}',
    // The file host is on 127.0.0.1.
    'predictions: { webhooks: { allow_private: true } }',
    'accounts:',
    '  - { name: corpus, keys: [{ name: corpus, key_env: CORPUS_KEY }] }',
    'models:',
    ...models.flatMap((m, i) => [
      `  - namespace: corpus/${m.name}`,
      `    name: ${m.name}`,
      '    type: image',
      '    vendor: { name: Corpus, slug: corpus }',
      '    serves: [predictions]',
      `    routes: [{ provider: cog${i} }]`,
      ...(m.options.unknown_inputs ? [`    unknown_inputs: ${m.options.unknown_inputs}`] : []),
    ]),
  ].join('\n');
  const config = parseConfig(yaml, 'cog-corpus', { CORPUS_KEY: key });
  config.server.host = '127.0.0.1';
  config.server.port = 0;
  const { mkdtempSync, rmSync } = await import('node:fs');
  const { tmpdir } = await import('node:os');
  const dataDir = mkdtempSync(join(tmpdir(), 'gantry-corpus-'));
  config.server.dataDir = dataDir;
  config.predictions.filesDir = join(dataDir, 'files');
  const store = new SqliteStore(':memory:');
  syncAccounts(store, config);
  const { app } = await buildApp(config, store, { logger: false });
  await app.listen({ host: '127.0.0.1', port: 0 });
  const origin = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`;
  const call = async (method: string, path: string, body?: unknown) => {
    const res = await fetch(origin + path, {
      method,
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    return { status: res.status, body: (await res.json().catch(() => ({}))) as Json };
  };

  const results: CorpusResult[] = [];
  try {
    for (const [i, model] of models.entries()) {
      const fake = fakes[i] as FakeCogServer;
      const shown = await call('GET', `/v1/models/corpus/${model.name}`);
      const offline = shown.body.status === 'offline';
      if (offline !== (model.options.expect === 'offline')) {
        results.push({
          model: model.name,
          example: '(model)',
          verdict: 'offline-mismatch',
          reason: offline ? String(shown.body.status_reason ?? 'offline') : 'served',
        });
      }
      for (const example of model.examples) {
        results.push(await runExample(call, origin, model, example, fake, files));
      }
    }
  } finally {
    await app.close();
    store.close();
    await Promise.all([...fakes.map((f) => f.close()), files.close()]);
    rmSync(dataDir, { recursive: true, force: true });
  }
  const counted = results.filter((r) => r.example !== '(model)');
  const shouldAccept = counted.filter((r) => {
    const ex = models.find((m) => m.name === r.model)?.examples.find((e) => e.name === r.example);
    return ex !== undefined && (ex.cog ?? 'accepts') === 'accepts' && !ex.unknown;
  });
  const accepted = shouldAccept.filter((r) => r.verdict === 'accepted' || r.verdict === 'output-mismatch');
  return {
    models: models.length,
    examples: counted.length,
    acceptance: shouldAccept.length === 0 ? 1 : accepted.length / shouldAccept.length,
    results,
  };
}

async function runExample(
  call: (method: string, path: string, body?: unknown) => Promise<{ status: number; body: Json }>,
  gantryOrigin: string,
  model: CorpusModel,
  example: Example,
  fake: FakeCogServer,
  files: FileHost,
): Promise<CorpusResult> {
  const at = { model: model.name, example: example.name };
  const before = fake.received.length;
  const res = await call('POST', '/v1/predictions', {
    model: `corpus/${model.name}`,
    input: files.localise(example.input),
    await: true,
  });
  const received = fake.received.slice(before);
  const sent = received.map((input) => files.restore(input));
  const error = (res.body.error ?? {}) as Json;
  const named = (((error.details ?? {}) as Json).fields ?? []) as Array<{ field: string }>;
  const namedFields = new Set(named.map((f) => f.field));
  const reason = String(error.message ?? `HTTP ${res.status}`);

  if (example.cog === 'refuses') {
    if (res.status === 200 || sent.length > 0)
      return { ...at, verdict: 'false-acceptance', reason: `status ${String(res.body.status)}` };
    const missing = (example.fields ?? []).filter((f) => !namedFields.has(f));
    if (missing.length > 0)
      return { ...at, verdict: 'false-acceptance', reason: `refusal does not name ${missing.join(', ')}` };
    return { ...at, verdict: 'refused', reason };
  }
  if (example.unknown) {
    const missing = example.unknown.filter((f) => !namedFields.has(f));
    if (res.status === 400 && missing.length === 0 && sent.length === 0)
      return { ...at, verdict: 'refused-unknown', reason };
    return { ...at, verdict: 'false-rejection', reason: `unknown inputs not refused by name: ${reason}` };
  }
  if (res.status !== 200 || res.body.status !== 'succeeded')
    return {
      ...at,
      verdict: 'false-rejection',
      reason: `${reason} (${String(res.body.status ?? '')})`.trim(),
    };
  // Gantry fetches URL file inputs itself (README, "File inputs"): one reaching the backend as a URL
  // escaped the size limit and the address guard.
  const unfetched = JSON.stringify(received).includes(`${files.origin}/`);
  if (unfetched)
    return { ...at, verdict: 'sent-mismatch', reason: 'a URL file input reached the backend unfetched' };
  if (example.sent && !isDeepStrictEqual(sent[0], example.sent))
    return {
      ...at,
      verdict: 'sent-mismatch',
      reason: `sent ${JSON.stringify(sent[0])}, expected ${JSON.stringify(example.sent)}`,
    };
  const schema = outputSchemaOf(model.doc);
  const expected = expectedOutput(schema, sampleOutput(schema));
  const isLink = (s: string) => s.startsWith(`${gantryOrigin}/`);
  if (
    !isDeepStrictEqual(
      shapeOf(res.body.output, isLink),
      shapeOf(expected, (s) => s === PNG_DATA_URI),
    )
  )
    return {
      ...at,
      verdict: 'output-mismatch',
      reason: `output ${JSON.stringify(res.body.output)}, expected the shape of ${JSON.stringify(expected).slice(0, 80)}`,
    };
  return { ...at, verdict: 'accepted' };
}

function printReport(report: CorpusReport): void {
  const count = (v: CorpusResult['verdict']) => report.results.filter((r) => r.verdict === v).length;
  console.log(`${report.models} models, ${report.examples} example inputs`);
  console.log(`acceptance of inputs Python Cog accepts: ${(report.acceptance * 100).toFixed(1)} %`);
  console.log(
    `accepted ${count('accepted')}, refused as Cog refuses ${count('refused')}, unknown fields refused by choice ${count('refused-unknown')}`,
  );
  for (const verdict of [
    'false-rejection',
    'false-acceptance',
    'sent-mismatch',
    'output-mismatch',
    'offline-mismatch',
  ] as const) {
    const rows = report.results.filter((r) => r.verdict === verdict);
    console.log(`${verdict}: ${rows.length}`);
    for (const r of rows) console.log(`  ${r.model}/${r.example}: ${r.reason ?? ''}`);
  }
}

const FAILING = new Set([
  'false-rejection',
  'false-acceptance',
  'sent-mismatch',
  'output-mismatch',
  'offline-mismatch',
]);

if (process.argv[1] && resolve(process.argv[1]) === resolve(import.meta.filename)) {
  const args = process.argv.slice(2);
  const dir = args.find((a) => !a.startsWith('--'));
  if (!dir) {
    console.error('usage: npm run cog:corpus -- <dir> [--json]');
    process.exit(2);
  }
  const report = await runCorpus(dir);
  if (args.includes('--json')) console.log(JSON.stringify(report, null, 2));
  else printReport(report);
  process.exitCode = report.results.some((r) => FAILING.has(r.verdict)) ? 1 : 0;
}

/**
 * A fake of the two external classifier services Gantry calls (README, "External classifiers"), on one
 * real node:http server on 127.0.0.1, written from their documented formats:
 *
 * - OpenAI moderations: `POST …/moderations`, `Authorization: Bearer`, `{"model"?, "input": string |
 *   string[]}` → `{"id", "model", "results": [{"flagged", "categories", "category_scores",
 *   "category_applied_input_types"}]}` (one result per input, all thirteen categories), errors as
 *   `{"error": {"message", "type", "param", "code"}}`.
 * - Azure AI Content Safety 2024-09-01: `POST /contentsafety/text:analyze?api-version=…` and
 *   `/contentsafety/text:shieldPrompt`, `Ocp-Apim-Subscription-Key`; answers `{"blocklistsMatch": [],
 *   "categoriesAnalysis": [{"category", "severity"}]}` and `{"userPromptAnalysis": {"attackDetected"},
 *   "documentsAnalysis": [{"attackDetected"}]}`; errors as `{"error": {"code", "message"}}`. It refuses
 *   what the service refuses: a text over 10,000 code points, documents over five or 10,000 in total.
 *
 * Answers are keyed by markers in the text: `[[violence=0.82]]` sets a moderation score (`!` after the
 * number flags it: `[[self-harm/intent=0.6!]]`), `[[Violence=6]]` an Azure severity (0-7; trimmed to
 * 0, 2, 4, 6 for FourSeverityLevels), `[[attack]]` an attack for Prompt Shields. Scripted per request:
 * delay, status, a body that is not JSON, a JSON body of the wrong shape, a dropped connection, a body
 * that arrives slowly.
 */
import type { FakeServerControls, RecordedExchange, Exchange as ServerExchange } from './fake-server.js';
import { sendJson, sleep, startRecordingServer, write } from './fake-server.js';

export interface ModerationBehavior {
  /** Wait this long before answering. */
  delayMs?: number;
  /** Answer with this status and the API's error body. */
  status?: number;
  /** The error body's code (and message), instead of the status's usual one. */
  error?: { code?: string; message?: string };
  /** Answer 200 with a body that is not JSON. */
  badBody?: boolean;
  /** Answer 200 with `{}`: JSON, but not the API's answer. */
  wrongShape?: boolean;
  /** Destroy the connection after reading the request, before any answer. */
  drop?: boolean;
  /** Send the status, headers and the first bytes of a 200 body at once, the rest after this long. */
  slowBodyMs?: number;
}

export type ModerationRequest = RecordedExchange<ModerationBehavior>;

export interface FakeModerationOptions {
  /** The Bearer key of the moderations API; other keys get OpenAI's 401. */
  openaiKey?: string;
  /** The subscription key of Content Safety; other keys get Azure's 401. */
  azureKey?: string;
}

export interface FakeModeration extends FakeServerControls<ModerationBehavior> {
  origin: string;
  /** The URL to configure for openai_moderations. */
  moderationsUrl: string;
}

/** The thirteen moderation categories of the omni models, in the order OpenAI's reference lists them. */
export const MODERATION_CATEGORIES = [
  'harassment',
  'harassment/threatening',
  'hate',
  'hate/threatening',
  'illicit',
  'illicit/violent',
  'self-harm',
  'self-harm/intent',
  'self-harm/instructions',
  'sexual',
  'sexual/minors',
  'violence',
  'violence/graphic',
] as const;

const AZURE_CATEGORIES = ['Hate', 'SelfHarm', 'Sexual', 'Violence'];
const AZURE_MAX = 10_000;
/** The score a category gets without a marker. */
const BASELINE = 0.000_12;

type Exchange = ServerExchange<ModerationBehavior>;

export async function startFakeModeration(options: FakeModerationOptions = {}): Promise<FakeModeration> {
  async function handle(ex: Exchange) {
    const { req, behavior } = ex;
    if (behavior.drop) return ex.cut();
    if (behavior.slowBodyMs !== undefined) {
      ex.res.writeHead(200, { 'content-type': 'application/json' });
      await write(ex.res, '{"results": ', ex.gone);
      await sleep(behavior.slowBodyMs, ex.gone);
      if (!ex.gone.aborted) ex.res.end('[]}');
      return;
    }
    if (behavior.delayMs) {
      await sleep(behavior.delayMs, ex.gone);
      if (ex.gone.aborted) return;
    }
    const url = new URL(req.url ?? '/', 'http://fake');
    const azure = url.pathname.startsWith('/contentsafety/');
    if (azure) return handleAzure(ex, url);
    return handleOpenAI(ex, url);
  }

  function handleOpenAI(ex: Exchange, url: URL) {
    const { req, behavior, body } = ex;
    const fail = (status: number, message: string, code: string | null, type = 'invalid_request_error') =>
      sendJson(
        ex.res,
        status,
        { error: { message, type, param: null, code } },
        { 'x-request-id': `req_fake${ex.id}` },
      );
    if (req.method !== 'POST' || !url.pathname.endsWith('/moderations')) {
      return fail(404, `Invalid URL (${req.method} ${url.pathname})`, null);
    }
    const auth = String(req.headers.authorization ?? '');
    if (options.openaiKey !== undefined && auth !== `Bearer ${options.openaiKey}`) {
      // OpenAI's 401 names the key it got, masked: a client must not pass this message on.
      const got = auth.replace(/^Bearer /, '');
      return fail(
        401,
        `Incorrect API key provided: ${got.slice(0, 3)}*****${got.slice(-4)}. You can find your API key at https://platform.openai.com/account/api-keys.`,
        'invalid_api_key',
      );
    }
    if (behavior.status !== undefined) {
      return fail(
        behavior.status,
        behavior.error?.message ?? 'The server had an error while processing your request.',
        behavior.error?.code ?? null,
        behavior.status >= 500 ? 'server_error' : 'invalid_request_error',
      );
    }
    if (behavior.badBody) return sendJson(ex.res, 200, '{"id": "modr-broken", "results": [');
    if (behavior.wrongShape) return sendJson(ex.res, 200, {});
    const input = body?.input;
    const inputs = typeof input === 'string' ? [input] : Array.isArray(input) ? input : undefined;
    if (inputs === undefined || !inputs.every((i): i is string => typeof i === 'string')) {
      return fail(400, "'input' is a required property", null);
    }
    const model = typeof body?.model === 'string' ? body.model : 'omni-moderation-latest';
    sendJson(
      ex.res,
      200,
      {
        id: `modr-fake${ex.id}`,
        model: model === 'omni-moderation-latest' ? 'omni-moderation-2024-09-26' : model,
        results: inputs.map(moderationResult),
      },
      { 'x-request-id': `req_fake${ex.id}`, 'openai-version': '2020-10-01' },
    );
  }

  function handleAzure(ex: Exchange, url: URL) {
    const { req, behavior, body } = ex;
    const headers = { 'apim-request-id': `00000000-0000-4000-8000-${String(ex.id).padStart(12, '0')}` };
    const fail = (status: number, code: string, message: string) =>
      sendJson(
        ex.res,
        status,
        { error: { code, message } },
        { ...headers, 'x-ms-error-code': code },
        'application/json; charset=utf-8',
      );
    const operation = url.pathname.slice('/contentsafety/'.length);
    if (req.method !== 'POST' || (operation !== 'text:analyze' && operation !== 'text:shieldPrompt')) {
      return fail(404, '404', 'Resource not found');
    }
    if (options.azureKey !== undefined && req.headers['ocp-apim-subscription-key'] !== options.azureKey) {
      return fail(
        401,
        '401',
        'Access denied due to invalid subscription key or wrong API endpoint. Make sure to provide a valid key for an active subscription and use a correct regional API endpoint for your resource.',
      );
    }
    if (url.searchParams.get('api-version') !== '2024-09-01') {
      return fail(404, '404', 'Resource not found');
    }
    if (behavior.status !== undefined) {
      return fail(
        behavior.status,
        behavior.error?.code ?? (behavior.status >= 500 ? 'InternalServerError' : 'InvalidRequestBody'),
        behavior.error?.message ?? 'The request failed.',
      );
    }
    if (behavior.badBody) return sendJson(ex.res, 200, '<html>gateway</html>', headers, 'text/html');
    if (behavior.wrongShape) return sendJson(ex.res, 200, {}, headers, 'application/json; charset=utf-8');
    const ok = (value: unknown) => sendJson(ex.res, 200, value, headers, 'application/json; charset=utf-8');

    if (operation === 'text:analyze') {
      const text = body?.text;
      if (typeof text !== 'string') return fail(400, 'InvalidRequestBody', 'The text field is required.');
      if (codePoints(text) > AZURE_MAX) {
        return fail(400, 'InvalidRequestBody', `The maximum length of text is ${AZURE_MAX}.`);
      }
      const eight = body?.outputType === 'EightSeverityLevels';
      const asked = Array.isArray(body?.categories) ? (body.categories as string[]) : AZURE_CATEGORIES;
      const marked = markers(text);
      return ok({
        blocklistsMatch: [],
        categoriesAnalysis: asked.map((category) => {
          const level = Math.min(7, Math.max(0, Math.round(marked.get(category)?.value ?? 0)));
          return { category, severity: eight ? level : level - (level % 2) };
        }),
      });
    }
    const userPrompt = body?.userPrompt;
    const documents = body?.documents ?? [];
    if (
      (userPrompt !== undefined && typeof userPrompt !== 'string') ||
      !Array.isArray(documents) ||
      !documents.every((d): d is string => typeof d === 'string')
    ) {
      return fail(400, 'InvalidRequestBody', 'The request body is invalid.');
    }
    if (typeof userPrompt === 'string' && codePoints(userPrompt) > AZURE_MAX) {
      return fail(400, 'InvalidRequestBody', `The maximum length of userPrompt is ${AZURE_MAX}.`);
    }
    if (documents.length > 5 || documents.reduce((n, d) => n + codePoints(d), 0) > AZURE_MAX) {
      return fail(400, 'InvalidRequestBody', `At most 5 documents of ${AZURE_MAX} characters in total.`);
    }
    return ok({
      userPromptAnalysis: {
        attackDetected: typeof userPrompt === 'string' && userPrompt.includes('[[attack]]'),
      },
      documentsAnalysis: documents.map((d) => ({ attackDetected: d.includes('[[attack]]') })),
    });
  }

  const server = await startRecordingServer<ModerationBehavior>(handle, {
    name: 'fake moderation service',
    behavior: {},
    errorBody: (message) => ({ error: { message, type: 'server_error', param: null, code: null } }),
    resetIds: true,
  });
  return { ...server, moderationsUrl: `${server.origin}/v1/moderations` };
}

/** One moderation result for one input, from its markers. */
export function moderationResult(text: string): Record<string, unknown> {
  const marked = markers(text);
  const categories: Record<string, boolean> = {};
  const scores: Record<string, number> = {};
  const applied: Record<string, string[]> = {};
  for (const name of MODERATION_CATEGORIES) {
    const mark = marked.get(name);
    scores[name] = mark?.value ?? BASELINE;
    categories[name] = mark?.flagged ?? false;
    applied[name] = ['text'];
  }
  return {
    flagged: Object.values(categories).some(Boolean),
    categories,
    category_scores: scores,
    category_applied_input_types: applied,
  };
}

function markers(text: string): Map<string, { value: number; flagged: boolean }> {
  const found = new Map<string, { value: number; flagged: boolean }>();
  for (const m of text.matchAll(/\[\[([A-Za-z/-]+)=([0-9.]+)(!?)\]\]/g)) {
    found.set(m[1] ?? '', { value: Number(m[2]), flagged: m[3] === '!' });
  }
  return found;
}

function codePoints(text: string): number {
  let n = 0;
  for (const _ of text) n++;
  return n;
}

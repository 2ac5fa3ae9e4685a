/**
 * Failures as the official `openai` SDK sees them, through every provider kind: Gantry's own 400, the
 * upstream's 400 relayed, an upstream overload, and a failure mid-stream. The SDK must raise the matching
 * error class, and every error body and stream error event Gantry sends must be OpenAI's ErrorResponse
 * (the rig's checkWire, run at the end of each test, validates them against the vendored schemas).
 */
import OpenAI, { type APIError } from 'openai';
import { beforeAll, describe, expect, it } from 'vitest';
import { type Lane, PLAIN, PLAIN_LANES, useClientsRig } from '../../helpers/clients.js';

const rig = useClientsRig();
let client: OpenAI;
beforeAll(() => {
  client = new OpenAI({
    baseURL: rig().gantry.baseURL,
    apiKey: rig().gantry.key,
    maxRetries: 0,
    fetch: rig().fetch,
  });
});

const UPSTREAM_400 = 'The request is not valid: the fake upstream says so.';

/** One call on the lane's API, streamed or not, read to its end; the error it raised (or undefined). */
async function call(lane: Lane, stream: boolean, extra: Record<string, unknown> = {}): Promise<unknown> {
  try {
    if (lane.api === 'chat') {
      const params = {
        model: lane.model,
        messages: [{ role: 'user' as const, content: PLAIN.prompt }],
        ...extra,
      } as OpenAI.ChatCompletionCreateParams;
      if (!stream) {
        await client.chat.completions.create({ ...params, stream: false });
        return undefined;
      }
      for await (const _chunk of await client.chat.completions.create({ ...params, stream: true })) {
        // read to the end: a failure mid-stream is raised here
      }
      return undefined;
    }
    const params = {
      model: lane.model,
      input: PLAIN.prompt,
      ...extra,
    } as OpenAI.Responses.ResponseCreateParams;
    if (!stream) {
      await client.responses.create({ ...params, stream: false });
      return undefined;
    }
    for await (const _event of await client.responses.create({ ...params, stream: true })) {
      // read to the end: a failure mid-stream is raised here
    }
    return undefined;
  } catch (err) {
    return err;
  }
}

/** Scripts the lane's upstream to refuse the next request with a 400 (Anthropic's or OpenAI's body). */
function scriptBadRequest(lane: Lane): void {
  if (lane.kind === 'anthropic') {
    rig().anthropic.enqueue({ error: { status: 400, type: 'invalid_request_error', message: UPSTREAM_400 } });
  } else {
    rig().openai.enqueue({
      status: 400,
      error: { message: UPSTREAM_400, param: 'input', code: 'invalid_value' },
    });
  }
}

function scriptOverload(lane: Lane): void {
  if (lane.kind === 'anthropic') rig().anthropic.enqueue({ error: { status: 529 } });
  else rig().openai.enqueue({ status: 503 });
}

function scriptMidStreamFailure(lane: Lane): void {
  if (lane.kind === 'anthropic')
    rig().anthropic.enqueue({ reply: PLAIN.reply, errorEvent: { afterEvents: 3 } });
  else rig().openai.enqueue({ reply: PLAIN.reply, errorEvent: { afterChunks: 2 } });
}

describe.each(PLAIN_LANES)('errors through the openai SDK: $title', (lane: Lane) => {
  it.each([false, true])(
    "Gantry's own 400 (stream: %s) is a BadRequestError naming the parameter",
    async (stream) => {
      const err = await call(lane, stream, { temperature: 5 });
      expect(err).toBeInstanceOf(OpenAI.BadRequestError);
      expect(err).toMatchObject({ status: 400, param: 'temperature' });
      await rig().checkWire();
    },
  );
});

// The built-in local lanes have no upstream to script: the upstream's failures are tried on the others.
describe.each(PLAIN_LANES.filter((lane) => lane.scripted))(
  'upstream errors through the openai SDK: $title',
  (lane: Lane) => {
    it.each([false, true])(
      "the upstream's 400 (stream: %s) reaches the SDK as a 400 with its message",
      async (stream) => {
        scriptBadRequest(lane);
        const err = await call(lane, stream);
        expect(err).toBeInstanceOf(OpenAI.BadRequestError);
        expect((err as APIError).message).toContain(UPSTREAM_400);
        await rig().checkWire();
      },
    );

    it('an upstream overload is a 503 the SDK would retry', async () => {
      scriptOverload(lane);
      const err = await call(lane, false);
      expect(err).toBeInstanceOf(OpenAI.InternalServerError);
      expect((err as APIError).status).toBe(503);
      await rig().checkWire();
    });

    it('a failure mid-stream is raised by the SDK from an OpenAI error event', async () => {
      scriptMidStreamFailure(lane);
      const err = await call(lane, true);
      expect(err).toBeInstanceOf(Error);
      await rig().checkWire();
    });
  },
);

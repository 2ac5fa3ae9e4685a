/**
 * The stream's text-level checks, which read chunks without parsing them: they must hold for compact
 * JSON (OpenAI, vLLM) and for JSON with spaces (Python's json.dumps default).
 */
import { describe, expect, it } from 'vitest';
import { isRoleOnlyChunk } from '../../src/inference/preamble.js';
import { renameModelInEvent } from '../../src/inference/rename.js';

type Json = Record<string, unknown>;

function chunk(delta: Json, finish: string | null = null, model = 'up/model'): Json {
  return {
    id: 'chatcmpl-1',
    object: 'chat.completion.chunk',
    created: 1_700_000_000,
    model,
    choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }],
  };
}

const writers: Array<[string, (value: Json) => string]> = [
  ['compact', (value) => JSON.stringify(value)],
  ['spaced', (value) => JSON.stringify(value).replace(/([,:])(?=["{[\dntf-])/g, '$1 ')],
];

describe.each(writers)('isRoleOnlyChunk (%s JSON)', (_name, write) => {
  it('holds a chunk with only the role (and empty content)', () => {
    expect(isRoleOnlyChunk({ data: write(chunk({ role: 'assistant', content: '' })) })).toBe(true);
    expect(isRoleOnlyChunk({ data: write(chunk({ role: 'assistant' })) })).toBe(true);
  });

  it('lets a chunk with content or a finish reason through', () => {
    expect(isRoleOnlyChunk({ data: write(chunk({ role: 'assistant', content: 'Hi' })) })).toBe(false);
    expect(isRoleOnlyChunk({ data: write(chunk({ role: 'assistant' }, 'stop')) })).toBe(false);
  });
});

describe.each(writers)('renameModelInEvent (%s JSON)', (_name, write) => {
  it('gives the client the model name it asked for', () => {
    const rename = renameModelInEvent('up/model', 'acme/chat');
    const out = rename({ data: write(chunk({ content: 'Hi' })) });
    expect(JSON.parse(out.data)).toEqual(chunk({ content: 'Hi' }, null, 'acme/chat'));
  });

  it('writes a requested name with $ patterns as it is', () => {
    const rename = renameModelInEvent('up/model', "odd$&name$'");
    const out = rename({ data: write(chunk({ content: 'Hi' })) });
    expect(JSON.parse(out.data).model).toBe("odd$&name$'");
  });

  it('leaves a chunk naming another model alone (the same object)', () => {
    const rename = renameModelInEvent('up/model', 'acme/chat');
    const event = { data: write(chunk({ content: 'Hi' }, null, 'up/model-2')) };
    expect(rename(event)).toBe(event);
  });
});

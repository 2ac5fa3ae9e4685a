import { readdirSync, readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import { extractSchemas, ROOTS } from '../../scripts/vendor-openai-schemas.js';
import { assertOpenAISchema, loadOpenAPIDocument, OPENAPI_PATH, openAISchemaErrors } from './openapi.js';

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');

function testFiles(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const full = path.join(dir, name);
    if (statSync(full).isDirectory()) return testFiles(full);
    return name.endsWith('.ts') ? [full] : [];
  });
}

const chatCompletion = {
  id: 'chatcmpl-1',
  object: 'chat.completion',
  created: 1_700_000_000,
  model: 'gpt-4o-mini',
  choices: [
    {
      index: 0,
      message: { role: 'assistant', content: 'Hello!', refusal: null },
      logprobs: null,
      finish_reason: 'stop',
    },
  ],
  usage: { prompt_tokens: 5, completion_tokens: 2, total_tokens: 7 },
};

const chatChunk = {
  id: 'chatcmpl-1',
  object: 'chat.completion.chunk',
  created: 1_700_000_000,
  model: 'gpt-4o-mini',
  choices: [{ index: 0, delta: { content: 'Hel' }, logprobs: null, finish_reason: null }],
};

const embeddingResponse = {
  object: 'list',
  model: 'text-embedding-3-small',
  data: [{ object: 'embedding', index: 0, embedding: [0.1, -0.2, 0.3] }],
  usage: { prompt_tokens: 3, total_tokens: 3 },
};

const response = {
  id: 'resp_1',
  object: 'response',
  created_at: 1_700_000_000,
  status: 'completed',
  error: null,
  incomplete_details: null,
  instructions: null,
  model: 'gpt-4o-mini',
  output: [
    {
      id: 'msg_1',
      type: 'message',
      role: 'assistant',
      status: 'completed',
      content: [{ type: 'output_text', text: 'Hello!', annotations: [], logprobs: [] }],
    },
  ],
  parallel_tool_calls: true,
  tools: [],
  tool_choice: 'auto',
  metadata: {},
  temperature: 1,
  top_p: 1,
  usage: {
    input_tokens: 5,
    input_tokens_details: { cached_tokens: 0, cache_write_tokens: 0 },
    output_tokens: 2,
    output_tokens_details: { reasoning_tokens: 0 },
    total_tokens: 7,
  },
};

const textDelta = {
  type: 'response.output_text.delta',
  item_id: 'msg_1',
  output_index: 0,
  content_index: 0,
  delta: 'Hel',
  logprobs: [],
  sequence_number: 4,
};

describe('openapi helper', () => {
  it('accepts valid values of several schemas', () => {
    expect(openAISchemaErrors('CreateChatCompletionResponse', chatCompletion)).toEqual([]);
    expect(openAISchemaErrors('CreateChatCompletionStreamResponse', chatChunk)).toEqual([]);
    expect(openAISchemaErrors('CreateEmbeddingResponse', embeddingResponse)).toEqual([]);
    expect(openAISchemaErrors('Response', response)).toEqual([]);
    expect(openAISchemaErrors('ResponseTextDeltaEvent', textDelta)).toEqual([]);
    expect(openAISchemaErrors('ResponseStreamEvent', textDelta)).toEqual([]);
    const created = {
      type: 'response.created',
      response: { ...response, status: 'in_progress' },
      sequence_number: 0,
    };
    expect(openAISchemaErrors('ResponseCreatedEvent', created)).toEqual([]);
    expect(openAISchemaErrors('ResponseStreamEvent', created)).toEqual([]);
    const completed = { type: 'response.completed', response, sequence_number: 9 };
    expect(openAISchemaErrors('ResponseCompletedEvent', completed)).toEqual([]);
    const model = { id: 'gpt-4o-mini', object: 'model', created: 1_700_000_000, owned_by: 'openai' };
    expect(openAISchemaErrors('Model', model)).toEqual([]);
    expect(openAISchemaErrors('ListModelsResponse', { object: 'list', data: [model] })).toEqual([]);
    const error = { error: { message: 'bad', type: 'invalid_request_error', param: null, code: null } };
    expect(openAISchemaErrors('ErrorResponse', error)).toEqual([]);
    expect(() => assertOpenAISchema('CreateChatCompletionResponse', chatCompletion)).not.toThrow();
  });

  it('turns nullable: true into a null-permitting type', () => {
    // finish_reason is `nullable: true` with an enum in the YAML; null must pass, other strings must not.
    const nullFinish = { ...chatChunk, choices: [{ index: 0, delta: {}, finish_reason: null }] };
    expect(openAISchemaErrors('CreateChatCompletionStreamResponse', nullFinish)).toEqual([]);
    const badFinish = { ...chatChunk, choices: [{ index: 0, delta: {}, finish_reason: 'finished' }] };
    expect(openAISchemaErrors('CreateChatCompletionStreamResponse', badFinish)).not.toEqual([]);
  });

  it('rejects broken values, following $refs into other schemas', () => {
    const { usage: _usage, ...noUsage } = embeddingResponse;
    expect(openAISchemaErrors('CreateEmbeddingResponse', noUsage)).toContain(
      "/ must have required property 'usage'",
    );
    // The message's role is checked through $ref ChatCompletionResponseMessage.
    const wrongRole = {
      ...chatCompletion,
      choices: [{ ...chatCompletion.choices[0], message: { role: 'user', content: 'x', refusal: null } }],
    };
    const roleErrors = openAISchemaErrors('CreateChatCompletionResponse', wrongRole);
    expect(roleErrors.some((e) => e.startsWith('/choices/0/message/role'))).toBe(true);
    // Embedding vectors are numbers, through $ref Embedding.
    const textVector = { ...embeddingResponse, data: [{ object: 'embedding', index: 0, embedding: ['a'] }] };
    expect(openAISchemaErrors('CreateEmbeddingResponse', textVector)).not.toEqual([]);
    expect(openAISchemaErrors('ResponseTextDeltaEvent', { ...textDelta, sequence_number: 'x' })).not.toEqual(
      [],
    );
    expect(
      openAISchemaErrors('ResponseStreamEvent', { ...textDelta, type: 'response.nonsense' }),
    ).not.toEqual([]);
    expect(openAISchemaErrors('Response', { ...response, output: [{ type: 'message' }] })).not.toEqual([]);
    expect(openAISchemaErrors('Model', { id: 'm', object: 'model', owned_by: 'x' })).not.toEqual([]);
    expect(openAISchemaErrors('ErrorResponse', { error: { message: 'bad' } })).not.toEqual([]);
    expect(openAISchemaErrors('ListModelsResponse', { object: 'list', data: [{}] })).not.toEqual([]);
  });

  it('assertOpenAISchema names the schema and the failing paths', () => {
    const bad = { ...chatCompletion, object: 'chat.completion.chunk' };
    expect(() => assertOpenAISchema('CreateChatCompletionResponse', bad)).toThrow(
      /CreateChatCompletionResponse[\s\S]*\/object must be equal to one of the allowed values/,
    );
  });

  it('rejects unknown schema names, pointing at the vendoring script', () => {
    expect(() => openAISchemaErrors('NoSuchSchema', {})).toThrow(
      /NoSuchSchema .*scripts\/vendor-openai-schemas\.ts/,
    );
  });
});

describe('the vendored OpenAPI document', () => {
  it('is read from inside the repository', () => {
    const relative = path.relative(repoRoot, OPENAPI_PATH);
    expect(relative).toBe(path.join('test', 'fixtures', 'openai-openapi', 'openapi.yaml'));
    expect(statSync(OPENAPI_PATH).isFile()).toBe(true);
  });

  it('holds every schema it references and every schema the tests name', () => {
    const text = readFileSync(OPENAPI_PATH, 'utf8');
    const schemas = (
      parseYaml(text, { maxAliasCount: -1 }) as { components: { schemas: Record<string, never> } }
    ).components.schemas;
    // Closed under $ref (extractSchemas throws on a missing one) and nothing beyond what ROOTS reach.
    expect(Object.keys(extractSchemas(schemas, ROOTS))).toEqual(Object.keys(schemas));
    const named = new Set<string>();
    for (const file of testFiles(path.join(repoRoot, 'test'))) {
      const source = readFileSync(file, 'utf8');
      for (const m of source.matchAll(/(?:assertOpenAISchema|openAISchemaErrors)\(\s*'(\w+)'/g)) {
        if (m[1] !== 'NoSuchSchema') named.add(m[1] as string);
      }
    }
    expect(named.size).toBeGreaterThan(5);
    for (const name of named) expect(ROOTS, `${name} is not vendored`).toContain(name);
    expect(Object.keys((loadOpenAPIDocument().components as { schemas: object }).schemas)).toEqual(
      Object.keys(schemas),
    );
  });
});

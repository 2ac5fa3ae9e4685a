/**
 * redactMessages (src/safety/chat.ts) with a real Redactor (redact.ts, the offline classifier): what is
 * masked, what is left; the text the completion check reads from a message; what a filtered JSON
 * choice keeps.
 */
import { describe, expect, it } from 'vitest';
import { Metrics } from '../../src/metrics.js';
import type { PiiKind } from '../../src/safety/categories.js';
import {
  annotateChatCompletion,
  chatSafetyContext,
  checkChatPrompt,
  messageCheckText,
  redactMessages,
} from '../../src/safety/chat.js';
import { type ActiveSafety, newSafetyOutcome } from '../../src/safety/engine.js';
import { offlineClassifier } from '../../src/safety/offline/index.js';
import { PRESET_POLICIES } from '../../src/safety/policy.js';
import { Redactor } from '../../src/safety/redact.js';
import { assertOpenAISchema } from '../helpers/openapi.js';

const EMAIL = 'jane.doe@example.com';
const offline = offlineClassifier();
const emails = new Set<PiiKind>(['email']);

describe('redactMessages', () => {
  const cases: Array<{
    name: string;
    messages: unknown[];
    kinds?: Set<PiiKind>;
    out: unknown[];
    masked: number;
  }> = [
    {
      name: 'string content of user and system',
      messages: [
        { role: 'system', content: `Support for ${EMAIL}` },
        { role: 'user', content: `Mail ${EMAIL} and ${EMAIL}` },
      ],
      out: [
        { role: 'system', content: 'Support for [EMAIL]' },
        { role: 'user', content: 'Mail [EMAIL] and [EMAIL]' },
      ],
      masked: 3,
    },
    {
      name: 'text parts, not image parts',
      messages: [
        {
          role: 'user',
          content: [
            { type: 'text', text: `to ${EMAIL}` },
            { type: 'image_url', image_url: { url: `https://example.com/${EMAIL}.png` } },
          ],
        },
      ],
      out: [
        {
          role: 'user',
          content: [
            { type: 'text', text: 'to [EMAIL]' },
            { type: 'image_url', image_url: { url: `https://example.com/${EMAIL}.png` } },
          ],
        },
      ],
      masked: 1,
    },
    {
      name: 'tool and developer messages; the assistant turn left as it was',
      messages: [
        { role: 'developer', content: EMAIL },
        { role: 'assistant', content: `I will write to ${EMAIL}` },
        { role: 'tool', tool_call_id: 'c1', content: `sent to ${EMAIL}` },
      ],
      out: [
        { role: 'developer', content: '[EMAIL]' },
        { role: 'assistant', content: `I will write to ${EMAIL}` },
        { role: 'tool', tool_call_id: 'c1', content: 'sent to [EMAIL]' },
      ],
      masked: 2,
    },
    {
      name: 'kinds not listed are left',
      messages: [{ role: 'user', content: `Mail ${EMAIL}` }],
      kinds: new Set<PiiKind>(['phone']),
      out: [{ role: 'user', content: `Mail ${EMAIL}` }],
      masked: 0,
    },
  ];
  for (const c of cases) {
    it(c.name, () => {
      const before = structuredClone(c.messages);
      const redactor = new Redactor(offline, c.kinds ?? emails);
      const out = redactMessages(c.messages, redactor);
      expect(out).toEqual(c.out);
      expect(redactor.masked).toBe(c.masked);
      // The client's body is never changed in place; nothing masked: the very same array.
      expect(c.messages).toEqual(before);
      if (c.masked === 0) expect(out).toBe(c.messages);
    });
  }
});

describe('messageCheckText', () => {
  it('reads content, refusal, reasoning and tool call arguments', () => {
    expect(
      messageCheckText({
        content: 'a',
        refusal: 'b',
        reasoning_content: 'c',
        reasoning: 'd',
        tool_calls: [{ function: { arguments: '{"x":1}' } }, { function: { arguments: '' } }],
      }),
    ).toBe('a\nb\nc\nd\n{"x":1}');
    expect(messageCheckText({ content: null })).toBe('');
  });
});

describe('annotateChatCompletion under block', () => {
  const VIOLENT = 'I am going to kill you, I know where you live and I have a gun';
  it('a flagged refusal: the choice keeps none of the text (refusal, reasoning, logprobs, audio)', async () => {
    const active: ActiveSafety = {
      policy: PRESET_POLICIES.block as ActiveSafety['policy'],
      classifier: offline,
      onFailure: 'open',
    };
    const ctx = chatSafetyContext(active, newSafetyOutcome(), new Metrics({ processMetrics: false }));
    const prompt = checkChatPrompt(ctx, [{ role: 'user', content: 'hi' }], 0);
    const tokens = VIOLENT.split(' ').map((token) => ({ token, logprob: 0, bytes: null, top_logprobs: [] }));
    const out = await annotateChatCompletion(
      ctx,
      {
        id: 'chatcmpl-1',
        object: 'chat.completion',
        created: 1,
        model: 'm',
        choices: [
          {
            index: 0,
            finish_reason: 'stop',
            logprobs: { content: tokens, refusal: null },
            message: {
              role: 'assistant',
              content: null,
              refusal: VIOLENT,
              reasoning_content: VIOLENT,
              annotations: [],
              audio: { id: 'a', data: '', expires_at: 1, transcript: VIOLENT },
            },
          },
        ],
      },
      prompt,
    );
    assertOpenAISchema('CreateChatCompletionResponse', out);
    const choice = (out.choices as Array<Record<string, unknown>>)[0];
    expect(choice?.finish_reason).toBe('content_filter');
    expect(choice?.logprobs).toBeNull();
    expect(choice?.message).toEqual({ role: 'assistant', content: null, refusal: null });
    expect(JSON.stringify(out)).not.toContain('kill');
  });
});

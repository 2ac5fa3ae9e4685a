/**
 * redactMessages (src/safety/chat.ts) with a real Redactor (redact.ts, the offline classifier): what is
 * masked, what is left; and the text the completion check reads from a message.
 */
import { describe, expect, it } from 'vitest';
import type { PiiKind } from '../../src/safety/categories.js';
import { messageCheckText, redactMessages } from '../../src/safety/chat.js';
import { offlineClassifier } from '../../src/safety/offline/index.js';
import { Redactor } from '../../src/safety/redact.js';

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

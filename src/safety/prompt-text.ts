/**
 * The texts of a prompt that the safety checks classify: what the user, system or developer said
 * (`prompt`), and tool outputs (`document`, where an indirect attack would hide). Assistant turns are the
 * model's own words and are not checked again; images are not read.
 */
import type { PromptPart } from './engine.js';

type Part = PromptPart;

/** Text of a message `content`: a string, or the text of its text parts. */
function contentText(content: unknown): string {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return '';
  let text = '';
  for (const part of content) {
    if (part === null || typeof part !== 'object') continue;
    const p = part as { type?: unknown; text?: unknown };
    if (
      typeof p.text === 'string' &&
      (p.type === 'text' || p.type === 'input_text' || p.type === 'output_text')
    ) {
      text += text === '' ? p.text : `\n${p.text}`;
    }
  }
  return text;
}

/** Chat completions `messages` (validated) → the parts to check. */
export function chatPromptParts(messages: unknown): Part[] {
  const parts: Part[] = [];
  if (!Array.isArray(messages)) return parts;
  for (const message of messages) {
    if (message === null || typeof message !== 'object') continue;
    const { role, content } = message as { role?: unknown; content?: unknown };
    if (role === 'assistant') continue;
    const text = contentText(content);
    if (text === '') continue;
    parts.push({ text, source: role === 'tool' || role === 'function' ? 'document' : 'prompt' });
  }
  return parts;
}

/** Responses `instructions` and `input` (a string or items) → the parts to check. */
export function responsesPromptParts(instructions: unknown, input: unknown): Part[] {
  const parts: Part[] = [];
  if (typeof instructions === 'string' && instructions !== '')
    parts.push({ text: instructions, source: 'prompt' });
  if (typeof input === 'string') {
    if (input !== '') parts.push({ text: input, source: 'prompt' });
    return parts;
  }
  if (!Array.isArray(input)) return parts;
  for (const item of input) {
    if (item === null || typeof item !== 'object') continue;
    const it = item as { type?: unknown; role?: unknown; content?: unknown; output?: unknown };
    if (it.type === 'function_call_output') {
      const text = typeof it.output === 'string' ? it.output : contentText(it.output);
      if (text !== '') parts.push({ text, source: 'document' });
      continue;
    }
    if (it.role === undefined || it.role === 'assistant') continue;
    const text = contentText(it.content);
    if (text !== '') parts.push({ text, source: 'prompt' });
  }
  return parts;
}

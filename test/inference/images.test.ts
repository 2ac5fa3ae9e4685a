/**
 * Image parts and the image-to-text capability (src/inference/validate.ts): what the chat route checks
 * while validating, and rejectImagesUnlessCapable, which the Responses bridge calls on the chat messages
 * it builds from `input_image` items.
 */
import { describe, expect, it } from 'vitest';
import type { ModelEntry } from '../../src/config/types.js';
import { GantryError } from '../../src/errors.js';
import {
  IMAGE_CAPABILITY,
  rejectImagesUnlessCapable,
  requireImageCapability,
  takesImages,
  validateChatRequest,
} from '../../src/inference/validate.js';

function entry(capabilities?: string[]): ModelEntry {
  return {
    namespace: 'acme/model',
    name: 'Model',
    type: 'text',
    serves: ['inference'],
    apis: ['chat', 'responses'],
    routes: [{ provider: 'p', model: 'm' }],
    defaults: {},
    ...(capabilities ? { capabilities } : {}),
  };
}

const vision = entry(['text-to-text', IMAGE_CAPABILITY]);
const textOnly = entry(['text-to-text']);
const image = (url: unknown) => ({ type: 'image_url', image_url: { url } });

function refusal(fn: () => unknown): GantryError {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(GantryError);
    return err as GantryError;
  }
  throw new Error('expected a refusal');
}

describe('image parts', () => {
  it('finds the first image while validating a chat body, and nothing in a text-only one', () => {
    const body = {
      model: 'acme/model',
      messages: [
        { role: 'system', content: 'x' },
        { role: 'user', content: [{ type: 'text', text: 'a' }, image('https://example.com/a.png')] },
        { role: 'user', content: [image('data:image/jpeg;base64,/9j/')] },
      ],
    };
    expect(validateChatRequest(body).firstImage).toBe('messages[1].content[1]');
    expect(validateChatRequest({ model: 'm', messages: [{ role: 'user', content: 'hi' }] }).firstImage).toBe(
      undefined,
    );
  });

  it('a model takes images only with the image-to-text capability', () => {
    expect(takesImages(vision)).toBe(true);
    expect(takesImages(textOnly)).toBe(false);
    expect(takesImages(entry())).toBe(false);
    requireImageCapability(vision, 'messages[0].content[0]');
    requireImageCapability(textOnly, undefined);
    const err = refusal(() => requireImageCapability(textOnly, 'messages[1].content[0]'));
    expect(err.errorId).toBe('INVALID_PARAMETER');
    expect(err.status).toBe(400);
    expect(err.param).toBe('messages[1].content[0]');
    expect(err.message).toBe(
      'messages[1].content[0] is an image, and model acme/model does not take images (its capabilities do not include image-to-text)',
    );
  });

  it('rejectImagesUnlessCapable checks built messages: shape for every model, capability for images', () => {
    const messages = [
      { role: 'user', content: 'plain' },
      { role: 'user', content: [{ type: 'text', text: 'look' }, image('http://example.com/x.gif')] },
    ];
    rejectImagesUnlessCapable(vision, messages);
    rejectImagesUnlessCapable(textOnly, [{ role: 'user', content: 'plain' }]);
    expect(refusal(() => rejectImagesUnlessCapable(textOnly, messages)).param).toBe('messages[1].content[1]');
    const malformed: Array<[unknown, string]> = [
      [image('file:///etc/passwd'), 'messages[0].content[0].image_url.url'],
      [image('data:application/pdf;base64,JVBER'), 'messages[0].content[0].image_url.url'],
      [image(42), 'messages[0].content[0].image_url.url'],
      [{ type: 'image_url' }, 'messages[0].content[0].image_url'],
      [
        { type: 'image_url', image_url: { url: 'https://a.b/c.png', detail: 'max' } },
        'messages[0].content[0].image_url.detail',
      ],
    ];
    for (const [part, param] of malformed) {
      expect(
        refusal(() => rejectImagesUnlessCapable(vision, [{ role: 'user', content: [part] }])).param,
      ).toBe(param);
    }
  });
});

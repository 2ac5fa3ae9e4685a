/** Function tools the API tests offer a model, shared so every suite sends the same definition. */
import type OpenAI from 'openai';

/** A strict Responses API function tool taking one city (what the fakes' tool calls answer with). */
export const WEATHER_TOOL: OpenAI.Responses.FunctionTool = {
  type: 'function',
  name: 'get_weather',
  description: 'Current weather of a city',
  parameters: {
    type: 'object',
    properties: { city: { type: 'string' } },
    required: ['city'],
    additionalProperties: false,
  },
  strict: true,
};

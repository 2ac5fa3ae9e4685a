import { chatCompletions } from '../routes/chat.js';
import { createEmbeddings } from '../routes/embeddings.js';
import { createResponse } from '../routes/responses.js';
import type { InferenceHandler } from './fast-path.js';

/** The routes the fast path serves: the same handlers fastify registers for them (src/routes). */
export const INFERENCE_ROUTES: ReadonlyMap<string, InferenceHandler> = new Map<string, InferenceHandler>([
  ['/v1/chat/completions', chatCompletions],
  ['/v1/embeddings', createEmbeddings],
  ['/v1/responses', createResponse],
]);

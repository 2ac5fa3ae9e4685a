import type { Principal } from '../auth/authenticate.js';
import type { CatalogModel } from '../catalog.js';
import type { Api } from '../config/types.js';
import type { Gantry } from '../context.js';
import { GantryError } from '../errors.js';
import { modelUnavailable } from './dispatch.js';
import type { InferenceRequest } from './exchange.js';

const API_PATHS: Record<Api, string> = {
  chat: '/v1/chat/completions',
  responses: '/v1/responses',
  embeddings: '/v1/embeddings',
  other: 'this endpoint',
};

export function principalOf(request: { readonly principal: Principal | null }): Principal {
  if (!request.principal) throw new GantryError('UNAUTHORIZED');
  return request.principal;
}

/** The catalogue entry for an inference call, or the error that says why the model cannot serve it. */
export function resolveInferenceModel(
  gantry: Gantry,
  request: InferenceRequest,
  name: string,
  api: Api,
): CatalogModel {
  const model = gantry.catalog.get(name, principalOf(request).account);
  if (!model) {
    throw new GantryError('MODEL_NOT_FOUND', {
      message: `The model ${name} does not exist or your key may not use it`,
      param: 'model',
      details: 'GET /v1/models lists the models your key may use.',
    });
  }
  const entry = model.entry;
  if (!entry.serves.includes('inference')) {
    throw new GantryError('MODEL_NOT_SUPPORTED', {
      message: `The model ${name} is served by the Predictions API, not by ${API_PATHS[api]}`,
      param: 'model',
      details: 'Create a prediction with POST /v1/predictions instead.',
    });
  }
  if (!entry.apis.includes(api)) {
    throw new GantryError('MODEL_NOT_SUPPORTED', {
      message: `The model ${name} does not serve ${API_PATHS[api]}`,
      param: 'model',
    });
  }
  // Offline in the config, or by an operator's override (README, "Status page" → overrides).
  const offline = gantry.catalog.offline(entry);
  if (offline !== undefined) {
    throw new GantryError('MODEL_NOT_ACTIVE', {
      message: `The model ${name} is offline`,
      param: 'model',
      ...(offline.reason === undefined ? {} : { details: offline.reason }),
    });
  }
  request.labels.model = entry.namespace;
  // Every circuit open: a fast 503 before any other work (credits, admission, safety checks), so a
  // client retrying a dead model spends neither its rate limit nor a round trip (README, "Routing and
  // health"). dispatch() checks again for a circuit that opens in between.
  const routing = gantry.routing.of(entry.namespace);
  if (routing !== undefined && routing.deployments.length > 0) {
    const now = Date.now();
    let refused = true;
    for (const d of routing.deployments) {
      if (d.breaker.selectable(now)) {
        refused = false;
        break;
      }
    }
    if (refused) throw modelUnavailable(entry.namespace, routing.retryAfterSeconds(now));
  }
  return model;
}

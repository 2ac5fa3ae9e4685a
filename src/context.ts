import type { InferenceProvider } from '../providers/types.js';
import type { ControlPlane } from './admin/plane.js';
import type { Authenticator } from './auth/authenticate.js';
import type { Catalog } from './catalog.js';
import type { GantryConfig } from './config/types.js';
import type { Predictions } from './predictions/setup.js';
import type { Routing } from './routing/router.js';
import type { Safety } from './safety/engine.js';
import type { Services } from './services.js';
import type { SqliteStore } from './store/sqlite.js';

/**
 * Everything a route needs, built once at start by buildApp (app.ts). It lives below the routes so that
 * routes and the inference pipeline depend on this shape, not on the module that assembles the app.
 */
export interface Gantry {
  config: GantryConfig;
  store: SqliteStore;
  services: Services;
  catalog: Catalog;
  providers: ReadonlyMap<string, InferenceProvider>;
  auth: Authenticator;
  predictions: Predictions;
  /** Safety policies and classifiers (README, "Safety"). */
  safety: Safety;
  /** Deployment choice, circuit breakers and derived model status (README, "Routing and health"). */
  routing: Routing;
  /** Admin keys and console sessions, audit log, usage queries, incidents, overrides, subscribers. */
  plane: ControlPlane;
}

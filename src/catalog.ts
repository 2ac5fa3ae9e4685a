import type { ModelEntry } from './config/types.js';
import type { DerivedStatus, ModelStatus } from './routing/status.js';
import type { Account } from './store/types.js';

/** An operator's status override of a model (src/status/overrides.ts), as the catalogue reads it. */
export interface OverrideLookup {
  get(namespace: string): { status: ModelStatus; reason: string } | undefined;
}

/** A model's status as every surface shows it. */
export interface ModelStatusView {
  status: ModelStatus;
  reason: string | null;
}

/** The Model fields of spec 2.1 that every list item and get-one carries (schemas only on request). */
const MODEL_FIELDS = [
  'name',
  'description',
  'namespace',
  'type',
  'privacy',
  'img_url',
  'vendor',
  'billable',
  'pricing',
  'capabilities',
  'metadata',
  'status',
] as const;

export interface CatalogModel {
  readonly entry: ModelEntry;
  /** The public Model object (spec fields + OpenAI's id/object/created/owned_by), built once at start. */
  readonly view: Readonly<Record<string, unknown>>;
}

/** The model catalogue: lookups by namespace and per-account visibility, all computed at start. */
export class Catalog {
  private readonly byNamespace = new Map<string, CatalogModel>();
  private readonly ordered: CatalogModel[] = [];
  private overrides: OverrideLookup | undefined;

  constructor(
    models: ModelEntry[],
    private readonly createdAt: number,
  ) {
    for (const entry of models) {
      const model: CatalogModel = { entry, view: Object.freeze(toView(entry, createdAt)) };
      this.byNamespace.set(entry.namespace, model);
      this.ordered.push(model);
    }
  }

  /**
   * A model Gantry cannot serve (its input schema does not compile, its schemas cannot be read yet) is
   * shown `offline` with `status_reason`, and refused on use; the others are untouched.
   */
  takeOffline(namespace: string, reason: string): void {
    const model = this.byNamespace.get(namespace);
    if (!model) return;
    model.entry.status = 'offline';
    model.entry.status_reason = reason;
    const updated: CatalogModel = {
      entry: model.entry,
      view: Object.freeze(toView(model.entry, this.createdAt)),
    };
    this.byNamespace.set(namespace, updated);
    this.ordered[this.ordered.indexOf(model)] = updated;
  }

  /**
   * A model taken offline at start whose schemas have since loaded (src/predictions/setup.ts): back to
   * `status` (its configured one), without `status_reason`, and shown with its entry as it is now.
   */
  bringOnline(namespace: string, status: ModelEntry['status']): void {
    const model = this.byNamespace.get(namespace);
    if (!model) return;
    if (status === undefined) delete model.entry.status;
    else model.entry.status = status;
    delete model.entry.status_reason;
    const updated: CatalogModel = {
      entry: model.entry,
      view: Object.freeze(toView(model.entry, this.createdAt)),
    };
    this.byNamespace.set(namespace, updated);
    this.ordered[this.ordered.indexOf(model)] = updated;
  }

  /** The admin API's status overrides (set once the control plane is built). */
  useOverrides(overrides: OverrideLookup): void {
    this.overrides = overrides;
  }

  /**
   * The status shown for a model: an operator's override through the admin API first, then the config's
   * `status` (also set by Gantry when it cannot serve a model), then the status derived from the
   * deployments' health (`derived`, from the routing), else operational.
   */
  statusOf(entry: ModelEntry, derived: DerivedStatus | undefined): ModelStatusView {
    const override = this.overrides?.get(entry.namespace);
    if (override !== undefined) return { status: override.status, reason: override.reason };
    if (entry.status !== undefined) {
      return { status: entry.status, reason: entry.status_reason ?? null };
    }
    if (derived === undefined || derived.status === 'operational')
      return { status: 'operational', reason: null };
    return { status: derived.status, reason: derived.reason ?? null };
  }

  /**
   * Whether calls to the model are refused as not active, and why when known: `offline` in the config
   * (which an override cannot lift: Gantry may have found the model unservable), or an `offline` override.
   */
  offline(entry: ModelEntry): { reason: string | undefined } | undefined {
    if (entry.status === 'offline') return { reason: entry.status_reason };
    const override = this.overrides?.get(entry.namespace);
    if (override?.status === 'offline') return { reason: override.reason };
    return undefined;
  }

  /** The model if it exists and the account may use it. */
  get(namespace: string, account: Account): CatalogModel | undefined {
    const model = this.byNamespace.get(namespace);
    return model && isVisible(model.entry, account) ? model : undefined;
  }

  /** The entry whatever the account (workers and billing, after the API checked visibility). */
  entry(namespace: string): ModelEntry | undefined {
    return this.byNamespace.get(namespace)?.entry;
  }

  visibleTo(account: Account): CatalogModel[] {
    return this.ordered.filter((m) => isVisible(m.entry, account));
  }

  all(): readonly CatalogModel[] {
    return this.ordered;
  }
}

function isVisible(entry: ModelEntry, account: Account): boolean {
  return entry.accounts === undefined || entry.accounts.includes(account.name);
}

function toView(entry: ModelEntry, createdAt: number): Record<string, unknown> {
  const vendor = entry.vendor ?? { name: 'unknown', slug: 'unknown' };
  const view: Record<string, unknown> = {
    id: entry.namespace,
    object: 'model',
    created: entry.created ?? createdAt,
    owned_by: String(vendor.slug ?? 'unknown'),
  };
  const defaults: Record<string, unknown> = {
    description: '',
    privacy: entry.accounts ? 'private' : 'public',
    img_url: null,
    vendor: {
      name: vendor.name,
      description: vendor.description ?? '',
      image_url: vendor.image_url ?? null,
      verified: vendor.verified ?? false,
      slug: vendor.slug,
      metadata: vendor.metadata ?? null,
    },
    billable: false,
    pricing: { amount: 0, currency: 'USD', unit: 'million_token' },
    capabilities: [],
    metadata: {
      edge_compatible: false,
      openai_compatible: entry.serves.includes('inference'),
      cold_boot: false,
    },
    status: 'operational',
  };
  for (const field of MODEL_FIELDS) {
    const value = field === 'vendor' ? defaults.vendor : (entry[field] ?? defaults[field]);
    view[field] = value;
  }
  // Gantry extension: why a model is offline when Gantry took it offline (README, Models).
  if (entry.status_reason !== undefined) view.status_reason = entry.status_reason;
  return view;
}

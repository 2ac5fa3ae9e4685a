import { webSchema } from './web.js';

/**
 * JSON Schema of the YAML configuration file. ajv checks the file against it at start, so every mistake is
 * reported with its path before Gantry binds a port.
 */

const timeouts = {
  type: 'object',
  additionalProperties: false,
  properties: {
    connect_ms: { type: 'integer', minimum: 1 },
    first_byte_ms: { type: 'integer', minimum: 1 },
    idle_ms: { type: 'integer', minimum: 1 },
    total_ms: { type: 'integer', minimum: 1 },
  },
};

const provider = {
  type: 'object',
  additionalProperties: false,
  required: ['kind'],
  properties: {
    kind: { enum: ['openai', 'anthropic', 'local', 'cog', 'replicate'] },
    base_url: { type: 'string', pattern: '^https?://' },
    api_key_env: { type: 'string', pattern: '^[A-Za-z_][A-Za-z0-9_]*$' },
    timeouts,
    max_connections: { type: 'integer', minimum: 1, maximum: 4096 },
    supports_responses: { type: 'boolean' },
    headers: { type: 'object', additionalProperties: { type: 'string' } },
    embedding_dimensions: { type: 'integer', minimum: 1, maximum: 8192 },
    chunk_delay_ms: { type: 'integer', minimum: 0 },
    context_length: { type: 'integer', minimum: 1 },
    max_output_tokens: { type: 'integer', minimum: 1 },
    /** cog: the Cog server POSTs its progress back to Gantry (Prefer: respond-async) instead of one blocking call. */
    async: { type: 'boolean' },
    /** replicate: how often a running partner prediction is polled. */
    poll_interval_ms: { type: 'integer', minimum: 10 },
    /** cog, replicate: output URLs may point at loopback/private addresses (a backend on a private network). */
    allow_private_outputs: { type: 'boolean' },
  },
  allOf: [
    {
      if: { properties: { kind: { enum: ['openai', 'cog'] } } },
      // biome-ignore lint/suspicious/noThenProperty: JSON Schema keyword
      then: { required: ['base_url'] },
    },
  ],
};

const vendor = {
  type: 'object',
  additionalProperties: false,
  required: ['name', 'slug'],
  properties: {
    name: { type: 'string' },
    description: { type: 'string' },
    image_url: { type: ['string', 'null'] },
    verified: { type: 'boolean' },
    slug: { type: 'string' },
    metadata: { type: ['object', 'null'] },
  },
};

const pricing = {
  type: 'object',
  required: ['amount', 'currency', 'unit'],
  properties: {
    amount: { type: 'number', minimum: 0 },
    currency: { type: 'string' },
    unit: { type: 'string' },
    criterias: { type: 'array', items: { type: 'object' } },
    formula: { type: 'object' },
  },
};

const route = {
  type: 'object',
  additionalProperties: false,
  required: ['provider'],
  properties: {
    provider: { type: 'string' },
    model: { type: 'string', minLength: 1 },
    /** This route can continue a chat stream another route broke off (README, "Stream rescue"). */
    continuation: { type: 'boolean' },
    /** Share of the traffic under the `weighted` strategy. */
    weight: { type: 'number', minimum: 0, maximum: 1_000_000 },
  },
};

/** How a model's deployments are chosen and watched (README, "Routing and health"). */
const routingProperties = {
  strategy: { enum: ['priority', 'weighted', 'least_inflight', 'latency'] },
  first_token_ms: { type: 'integer', minimum: 1 },
  breaker: {
    type: 'object',
    additionalProperties: false,
    properties: {
      consecutive_failures: { type: 'integer', minimum: 1 },
      error_rate: { type: 'number', exclusiveMinimum: 0, maximum: 1 },
      min_requests: { type: 'integer', minimum: 1 },
      window_seconds: { type: 'number', exclusiveMinimum: 0 },
      cooldown_seconds: { type: 'number', exclusiveMinimum: 0 },
      half_open_requests: { type: 'integer', minimum: 1 },
    },
  },
  degraded: {
    type: 'object',
    additionalProperties: false,
    properties: {
      error_rate: { type: 'number', exclusiveMinimum: 0, maximum: 1 },
      ttfb_ms: { type: 'integer', minimum: 1 },
    },
  },
} as const;

const ceilings = {
  type: 'object',
  additionalProperties: false,
  properties: {
    concurrency: { type: 'integer', minimum: 1 },
    requests: { type: 'integer', minimum: 1 },
    input_tokens: { type: 'integer', minimum: 1 },
    output_tokens: { type: 'integer', minimum: 1 },
  },
};

const tier = {
  type: 'object',
  additionalProperties: false,
  properties: {
    window_seconds: { type: 'number', exclusiveMinimum: 0 },
    /** Shared by all keys of an account. */
    account: ceilings,
    /** Each account×model bucket. */
    model: ceilings,
    /** Per-model overrides of `model`, by namespace. */
    models: { type: 'object', additionalProperties: ceilings },
  },
};

/** A safety policy's name: a preset (off, annotate, block, redact) or one of `safety.policies`. */
const policyName = { type: 'string', pattern: '^[A-Za-z0-9_-]+$' };

const severityThreshold = { enum: ['low', 'medium', 'high', 'off'] };

const probability = { type: 'number', minimum: 0, maximum: 1 };

const safetyPolicy = {
  type: 'object',
  additionalProperties: false,
  required: ['mode'],
  properties: {
    mode: { enum: ['off', 'annotate', 'block'] },
    classifier: { type: 'string', minLength: 1 },
    redact: { type: 'array', items: { enum: ['email', 'phone', 'payment_card', 'iban', 'secret'] } },
    thresholds: {
      type: 'object',
      additionalProperties: false,
      properties: {
        hate: severityThreshold,
        sexual: severityThreshold,
        violence: severityThreshold,
        self_harm: severityThreshold,
      },
    },
    filter: {
      type: 'object',
      additionalProperties: false,
      properties: {
        jailbreak: { type: 'boolean' },
        indirect_attack: { type: 'boolean' },
        profanity: { type: 'boolean' },
        protected_material_text: { type: 'boolean' },
        protected_material_code: { type: 'boolean' },
        pii: { type: 'boolean' },
      },
    },
  },
};

const safetyClassifier = {
  type: 'object',
  additionalProperties: false,
  required: ['kind', 'url'],
  properties: {
    /** An OpenAI-compatible `/v1/moderations` endpoint, or Azure AI Content Safety. */
    kind: { enum: ['openai_moderations', 'azure_content_safety'] },
    url: { type: 'string', pattern: '^https?://' },
    api_key_env: { type: 'string', pattern: '^[A-Za-z_][A-Za-z0-9_]*$' },
    model: { type: 'string', minLength: 1 },
    timeout_ms: { type: 'integer', minimum: 1, maximum: 60_000 },
    on_failure: { enum: ['open', 'closed'] },
  },
};

const model = {
  type: 'object',
  additionalProperties: false,
  required: ['namespace', 'name', 'type', 'routes'],
  properties: {
    namespace: { type: 'string', pattern: '^[A-Za-z0-9][A-Za-z0-9._:/-]*$' },
    name: { type: 'string' },
    description: { type: 'string' },
    type: { type: 'string' },
    privacy: { type: 'string' },
    img_url: { type: ['string', 'null'] },
    vendor,
    billable: { type: 'boolean' },
    pricing,
    capabilities: { type: 'array', items: { type: 'string' } },
    metadata: { type: 'object' },
    status: { enum: ['operational', 'degraded', 'offline'] },
    input_schema: { type: 'object' },
    output_schema: { type: 'object' },
    created: { type: 'integer', minimum: 0 },
    serves: { type: 'array', minItems: 1, items: { enum: ['inference', 'predictions'] } },
    apis: { type: 'array', items: { enum: ['chat', 'responses', 'embeddings', 'other'] } },
    routes: { type: 'array', minItems: 1, items: route },
    /** A chat stream silent this long counts as broken (README, "Stream rescue"); absent: no such check. */
    stream_stall_ms: { type: 'integer', minimum: 100, maximum: 3_600_000 },
    routing: { type: 'object', additionalProperties: false, properties: routingProperties },
    defaults: { type: 'object' },
    accounts: { type: 'array', items: { type: 'string' } },
    /** Overrides of the tiers' per-model ceilings for this model (e.g. lower for compute-heavy models). */
    limits: ceilings,
    /** Prediction inputs the schema does not declare: refused (default) or dropped (README, Predictions). */
    unknown_inputs: { enum: ['refuse', 'drop'] },
    /** The safety policy of the model's answers and prediction prompts (README, "Safety"). */
    safety: policyName,
  },
};

const account = {
  type: 'object',
  additionalProperties: false,
  required: ['name'],
  properties: {
    name: { type: 'string', minLength: 1 },
    tier: { type: 'string' },
    status: { enum: ['active', 'suspended'] },
    safety: policyName,
    keys: {
      type: 'array',
      items: {
        type: 'object',
        additionalProperties: false,
        required: ['name', 'key_env'],
        properties: {
          name: { type: 'string', minLength: 1 },
          key_env: { type: 'string', pattern: '^[A-Za-z_][A-Za-z0-9_]*$' },
          safety: policyName,
        },
      },
    },
  },
};

export const configSchema = {
  type: 'object',
  additionalProperties: false,
  properties: {
    server: {
      type: 'object',
      additionalProperties: false,
      properties: {
        host: { type: 'string' },
        port: { type: 'integer', minimum: 0, maximum: 65535 },
        data_dir: { type: 'string' },
        body_limit_bytes: { type: 'integer', minimum: 1024 },
        log_level: { enum: ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] },
        public_url: { type: 'string', pattern: '^https?://' },
        headers_timeout_ms: { type: 'integer', minimum: 100 },
        request_timeout_ms: { type: 'integer', minimum: 100 },
        keep_alive_timeout_ms: { type: 'integer', minimum: 100 },
        max_connections_per_ip: { type: 'integer', minimum: 0 },
        trust_proxy: {
          anyOf: [
            { type: 'boolean' },
            { type: 'array', items: { type: 'string', minLength: 1 }, minItems: 1 },
          ],
        },
        callback_body_limit_bytes: { type: 'integer', minimum: 1024 },
        shutdown_timeout_seconds: { type: 'number', minimum: 0.1 },
      },
    },
    provider_defaults: {
      type: 'object',
      additionalProperties: false,
      properties: { timeouts, max_connections: { type: 'integer', minimum: 1 } },
    },
    providers: { type: 'object', additionalProperties: provider },
    models: { type: 'array', items: model },
    tiers: { type: 'object', additionalProperties: tier },
    limits: {
      type: 'object',
      additionalProperties: false,
      properties: {
        failure_policy: { enum: ['open', 'closed'] },
        lease_seconds: { type: 'number', exclusiveMinimum: 0 },
        default_max_output_tokens: { type: 'integer', minimum: 1 },
        redis_timeout_ms: { type: 'integer', minimum: 1 },
      },
    },
    credits: {
      type: 'object',
      additionalProperties: false,
      properties: {
        per_currency: { type: 'object', additionalProperties: { type: 'number', exclusiveMinimum: 0 } },
        default_balance: { anyOf: [{ type: 'number' }, { const: 'unlimited' }] },
      },
    },
    usage: {
      type: 'object',
      additionalProperties: false,
      properties: {
        jsonl_path: { type: 'string' },
        flush_ms: { type: 'integer', minimum: 1 },
        stream: { type: 'string' },
      },
    },
    metrics: {
      type: 'object',
      additionalProperties: false,
      properties: {
        enabled: { type: 'boolean' },
        port: { type: 'integer', minimum: 0, maximum: 65535 },
        token_env: { type: 'string', pattern: '^[A-Za-z_][A-Za-z0-9_]*$' },
      },
    },
    redis: {
      type: 'object',
      additionalProperties: false,
      properties: { url: { type: 'string', pattern: '^rediss?://' } },
    },
    accounts: { type: 'array', items: account },
    /** The defaults of every model's `routing`, active probes and the status history. */
    routing: {
      type: 'object',
      additionalProperties: false,
      properties: {
        ...routingProperties,
        probes: {
          type: 'object',
          additionalProperties: false,
          properties: {
            enabled: { type: 'boolean' },
            interval_seconds: { type: 'number', minimum: 0.05 },
            idle_seconds: { type: 'number', minimum: 0 },
            timeout_ms: { type: 'integer', minimum: 1 },
          },
        },
        history: {
          type: 'object',
          additionalProperties: false,
          properties: { max_entries: { type: 'integer', minimum: 10 } },
        },
      },
    },
    safety: {
      type: 'object',
      additionalProperties: false,
      properties: {
        /** The policy of models that name none. */
        default: policyName,
        /** Characters of a `block` stream held back until checked. */
        stream_window_chars: { type: 'integer', minimum: 16, maximum: 1000 },
        policies: { type: 'object', propertyNames: policyName, additionalProperties: safetyPolicy },
        classifiers: { type: 'object', propertyNames: policyName, additionalProperties: safetyClassifier },
        /** The image classifier's probability cut-offs (README, "Image outputs"); the rest keep their defaults. */
        image: {
          type: 'object',
          additionalProperties: false,
          properties: {
            explicit_high: probability,
            explicit_medium: probability,
            explicit_low: probability,
            suggestive_low: probability,
          },
        },
      },
    },
    ...webSchema,
    predictions: {
      type: 'object',
      additionalProperties: false,
      properties: {
        await_timeout_seconds: { type: 'number', exclusiveMinimum: 0 },
        retention_minutes: { type: 'number', exclusiveMinimum: 0 },
        max_attempts: { type: 'integer', minimum: 1, maximum: 20 },
        concurrency: { type: 'integer', minimum: 1, maximum: 1024 },
        worker_lock_seconds: { type: 'number', minimum: 1, maximum: 3600 },
        store_timeout_ms: { type: 'integer', minimum: 50, maximum: 60_000 },
        /** Largest file a prediction input may carry as a data: URI (decoded bytes). */
        max_input_file_bytes: { type: 'integer', minimum: 1 },
        files_dir: { type: 'string' },
        /** Where output files live: the local folder (default) or an S3-compatible bucket. */
        storage: {
          type: 'object',
          additionalProperties: false,
          required: ['kind'],
          properties: {
            kind: { enum: ['local', 's3'] },
            endpoint: { type: 'string', pattern: '^https?://' },
            region: { type: 'string', minLength: 1 },
            bucket: { type: 'string', minLength: 1 },
            prefix: { type: 'string' },
            access_key_env: { type: 'string', pattern: '^[A-Za-z_][A-Za-z0-9_]*$' },
            secret_key_env: { type: 'string', pattern: '^[A-Za-z_][A-Za-z0-9_]*$' },
            force_path_style: { type: 'boolean' },
          },
          allOf: [
            {
              if: { properties: { kind: { const: 's3' } } },
              // biome-ignore lint/suspicious/noThenProperty: JSON Schema keyword
              then: { required: ['region', 'bucket', 'access_key_env', 'secret_key_env'] },
            },
          ],
        },
        webhooks: {
          type: 'object',
          additionalProperties: false,
          properties: {
            allow_private: { type: 'boolean' },
            timeout_ms: { type: 'integer', minimum: 1 },
            retry_span_seconds: { type: 'number', minimum: 0 },
            backoff_base_ms: { type: 'integer', minimum: 1 },
            backoff_max_ms: { type: 'integer', minimum: 1 },
          },
        },
      },
    },
  },
} as const;

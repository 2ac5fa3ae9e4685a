/**
 * The web surfaces' part of the config (README, "Admin API", "Console", "Status page"): admin keys, the
 * console's session, incidents and the status page's e-mail. Schema, raw shape and the typed settings of
 * these sections live here together.
 */
import { createHash } from 'node:crypto';
import { MIN_KEY_LENGTH } from '../auth/keys.js';

export const webSchema = {
  admin: {
    type: 'object',
    additionalProperties: false,
    properties: {
      /** Admin keys by the SHA-256 (hex) of the key: the key itself never sits in the config. */
      keys: {
        type: 'array',
        items: {
          type: 'object',
          additionalProperties: false,
          required: ['name', 'sha256'],
          properties: {
            name: { type: 'string', minLength: 1, maxLength: 64 },
            sha256: { type: 'string', pattern: '^[0-9a-f]{64}$' },
          },
        },
      },
    },
  },
  console: {
    type: 'object',
    additionalProperties: false,
    properties: {
      enabled: { type: 'boolean' },
      session_hours: { type: 'number', exclusiveMinimum: 0, maximum: 720 },
    },
  },
  status_page: {
    type: 'object',
    additionalProperties: false,
    properties: {
      /** Incidents opened and resolved from model status changes. */
      auto_incidents: { type: 'boolean' },
      /** A model non-operational this long opens an incident (a blip does not). */
      incident_after_seconds: { type: 'number', minimum: 0 },
      email: {
        type: 'object',
        additionalProperties: false,
        required: ['from'],
        properties: {
          /** smtp://, smtps:// URL of the relay; credentials from smtp_url_env instead when they are secret. */
          smtp_url: { type: 'string', pattern: '^smtps?://' },
          smtp_url_env: { type: 'string', pattern: '^[A-Za-z_][A-Za-z0-9_]*$' },
          from: { type: 'string', minLength: 3 },
        },
      },
    },
  },
} as const;

export interface RawWeb {
  admin?: { keys?: Array<{ name: string; sha256: string }> };
  console?: { enabled?: boolean; session_hours?: number };
  status_page?: {
    auto_incidents?: boolean;
    incident_after_seconds?: number;
    email?: { smtp_url?: string; smtp_url_env?: string; from: string };
  };
}

export interface AdminKeyEntry {
  name: string;
  /** SHA-256 of the key, hex. */
  sha256: string;
}

export interface WebSettings {
  /** Admin keys (config `admin.keys`, plus `GANTRY_ADMIN_KEY` as the key named `env`). */
  adminKeys: AdminKeyEntry[];
  console: { enabled: boolean; sessionMs: number };
  statusPage: {
    autoIncidents: boolean;
    incidentAfterMs: number;
    /** undefined: no e-mail subscriptions (the page offers the feed only). */
    email: { smtpUrl: string; from: string } | undefined;
  };
}

export function buildWeb(
  raw: RawWeb,
  env: NodeJS.ProcessEnv,
  fail: (where: string, problem: string) => never,
): WebSettings {
  const adminKeys: AdminKeyEntry[] = (raw.admin?.keys ?? []).map((k) => ({ name: k.name, sha256: k.sha256 }));
  const envKey = env.GANTRY_ADMIN_KEY;
  if (envKey !== undefined && envKey !== '') {
    if (envKey.length < MIN_KEY_LENGTH) {
      fail(
        'GANTRY_ADMIN_KEY',
        `must be at least ${MIN_KEY_LENGTH} characters (make one with \`gantry admin-key create\`)`,
      );
    }
    adminKeys.push({ name: 'env', sha256: createHash('sha256').update(envKey).digest('hex') });
  }
  const names = new Set<string>();
  for (const [i, k] of adminKeys.entries()) {
    if (names.has(k.name)) fail(`/admin/keys/${i}/name`, `admin key name "${k.name}" is used twice`);
    names.add(k.name);
  }
  let email: WebSettings['statusPage']['email'];
  const rawEmail = raw.status_page?.email;
  if (rawEmail) {
    let smtpUrl = rawEmail.smtp_url;
    if (rawEmail.smtp_url_env) {
      smtpUrl = env[rawEmail.smtp_url_env];
      if (!smtpUrl)
        fail('/status_page/email/smtp_url_env', `environment variable ${rawEmail.smtp_url_env} is not set`);
    }
    if (!smtpUrl) fail('/status_page/email', 'give smtp_url or smtp_url_env');
    email = { smtpUrl, from: rawEmail.from };
  }
  return {
    adminKeys,
    console: {
      enabled: raw.console?.enabled ?? true,
      sessionMs: Math.round((raw.console?.session_hours ?? 12) * 3_600_000),
    },
    statusPage: {
      autoIncidents: raw.status_page?.auto_incidents ?? true,
      incidentAfterMs: Math.round((raw.status_page?.incident_after_seconds ?? 30) * 1000),
      email,
    },
  };
}

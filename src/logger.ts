import type { LoggerOptions } from 'pino';

/** Anything that may hold a credential, wherever it appears in a log object. */
export const REDACT_PATHS = [
  'req.headers.authorization',
  'req.headers["x-api-key"]',
  'headers.authorization',
  'headers["x-api-key"]',
  '*.api_key',
  '*.apiKey',
  '*.auth_token',
  '*.key',
  'config.providers[*].apiKey',
];

export function loggerOptions(level: string): LoggerOptions {
  return {
    level,
    redact: { paths: REDACT_PATHS, censor: '[redacted]' },
  };
}

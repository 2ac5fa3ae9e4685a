/**
 * The pure parts of `npm run chaos` (chaos/): the gantry.yaml it writes is one Gantry accepts, `--set`
 * reaches any key, and a run is clean only when every figure that must be 0 is. The run itself takes
 * minutes and is not part of `npm test` (README "Development").
 */
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { Tally } from '../chaos/client.js';
import { applySetting, chaosConfig, IMAGE_MODEL, writeConfig } from '../chaos/config.js';
import { type Figures, formatFigures, MUST_BE_ZERO } from '../chaos/report.js';
import { ConfigError, loadConfig } from '../src/config/load.js';
import { removeTempDirs, tempDir } from './helpers/temp-dirs.js';

afterAll(removeTempDirs);

function load(settings: string[] = []) {
  const tree = chaosConfig('/tmp/chaos-files');
  for (const s of settings) applySetting(tree, s);
  const path = join(tempDir('gantry-chaos-test-'), 'gantry.yaml');
  writeConfig(path, tree);
  return loadConfig(path, {});
}

describe('chaos config', () => {
  it('is a config Gantry accepts: the image model, private webhooks, the shared files dir', () => {
    const config = load();
    expect(config.models.map((m) => m.namespace)).toEqual([IMAGE_MODEL]);
    expect(config.predictions.webhooks.allowPrivate).toBe(true);
    expect(config.predictions.filesDir).toBe('/tmp/chaos-files');
  });

  it('--set changes nested keys, reads values as YAML and creates missing maps', () => {
    const tree = chaosConfig('/f');
    applySetting(tree, 'predictions.concurrency=4');
    applySetting(tree, 'predictions.webhooks.allow_private=false');
    applySetting(tree, 'usage.flush_ms=50');
    applySetting(tree, 'limits={failure_policy: closed}');
    expect(tree.predictions).toMatchObject({ concurrency: 4, webhooks: { allow_private: false } });
    expect(tree.usage).toEqual({ flush_ms: 50 });
    expect(tree.limits).toEqual({ failure_policy: 'closed' });
    expect(load(['predictions.concurrency=4']).predictions.concurrency).toBe(4);
  });

  it('--set of a key Gantry does not know fails at load, naming it', () => {
    expect(() => load(['predictions.no_such_key=1'])).toThrow(ConfigError);
    expect(() => load(['predictions.no_such_key=1'])).toThrow(/no_such_key/);
    expect(() => applySetting(chaosConfig('/f'), 'no-equals-sign')).toThrow(/path=value/);
  });
});

describe('chaos figures', () => {
  const zero: Figures = {
    sent: 10,
    accepted: 10,
    succeeded: 10,
    failed: 0,
    failedReasons: new Tally(),
    canceled: 0,
    stuck: 0,
    stuckStatuses: new Tally(),
    duplicateKeys: 0,
    terminalWebhooksMissing: 0,
    http500: 0,
    http500Routes: new Tally(),
    neverAccepted: 0,
    neverAcceptedReasons: new Tally(),
    startedWebhooksMissing: 0,
    ranMoreThanTwice: 0,
    ranTwice: 3,
    webhooksOutOfOrder: 0,
    conflictingWebhooks: 0,
    badSignatures: 0,
    unclaimed: 0,
    webhooksReceived: 20,
  };

  it('is clean when only sent, accepted, succeeded and the informative figures are non-zero', () => {
    expect(formatFigures('t', zero).clean).toBe(true);
  });

  it.each(MUST_BE_ZERO)('is not clean when %s is not 0, and prints its detail', (name, label) => {
    const reasons = new Tally();
    reasons.add('The prediction failed in its backend', 2);
    const { text, clean } = formatFigures('t', { ...zero, [name]: 2, failedReasons: reasons });
    expect(clean).toBe(false);
    expect(text).toMatch(new RegExp(`${label.replace(/[()]/g, '\\$&')}\\s+2`));
    if (name === 'failed') expect(text).toContain('2× The prediction failed in its backend');
  });
});

/**
 * A Gantry with the built-in image model, and predictions seeded the way the create path leaves them
 * when the prompt check ran (`safety.policy` on the record), queued for its worker.
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import type { PredictionRecord, PredictionSafety } from '../../src/predictions/types.js';
import { LOCAL_CONFIG, predictionModelYaml, startGantry, type TestGantry } from '../helpers/gantry.js';
import { predictionRecord } from '../helpers/prediction-record.js';
import { waitFor } from '../helpers/wait.js';

export const IMAGE = 'gantry/local-image';
/** The model served by a Cog server, when the rig has one. */
export const COG_IMAGE = 'acme/flux';

function config(cogOrigin: string | undefined): string {
  const providers = cogOrigin
    ? LOCAL_CONFIG.replace(
        '  local: { kind: local }\n',
        `  local: { kind: local }\n  cog: { kind: cog, base_url: "${cogOrigin}" }\n`,
      )
    : LOCAL_CONFIG;
  return `${providers}
  - { namespace: ${IMAGE}, name: Local image, type: image, vendor: { name: Gantry, slug: gantry }, serves: [predictions], routes: [{ provider: local, model: local-image }] }${cogOrigin ? predictionModelYaml(COG_IMAGE, 'cog') : ''}
`;
}

export interface ShownPrediction {
  id: string;
  status: string;
  error: string | null;
  output: string[] | null;
  metadata: { storage: { files: Array<{ name: string; url: string }> }; safety?: PredictionSafety };
}

export interface ImageRig {
  gantry: TestGantry;
  /** Runs a local-image prediction whose record says it was created under `policy` (none: no check ran). */
  predict(
    policy: string | undefined,
    input?: Record<string, unknown>,
    model?: string,
  ): Promise<ShownPrediction>;
  /** Whether any file of the prediction is on disk. */
  hasFiles(id: string): boolean;
  close(): Promise<void>;
}

/** `extra`: more YAML after the models (e.g. a `safety` section); `cogOrigin`: a Cog server's, for COG_IMAGE. */
export async function startImageRig(extra = '', cogOrigin?: string): Promise<ImageRig> {
  const gantry = await startGantry(`${config(cogOrigin)}${extra}`);
  const deps = gantry.gantry.predictions.deps;
  // One prediction through the API: its record gives the test account's ids for the seeded ones.
  const first = await show(gantry, await create(gantry));
  const owner = (await deps.store.get(first.id)) as PredictionRecord;
  return {
    gantry,
    async predict(
      policy,
      input = { prompt: 'a calm blue sea', seed: 2, width: 256, height: 256, output_format: 'png' },
      model = IMAGE,
    ) {
      const record = predictionRecord({
        accountId: owner.accountId,
        keyId: owner.keyId,
        model,
        input,
        ...(policy === undefined ? {} : { safety: { policy } }),
      });
      await deps.store.create(record);
      await deps.queue.add('prediction', record.id);
      return waitFor(
        `prediction ${record.id} to finish`,
        async () => {
          const shown = await show(gantry, record.id);
          return ['succeeded', 'failed', 'canceled'].includes(shown.status) ? shown : undefined;
        },
        90_000,
      );
    },
    hasFiles: (id) => existsSync(join(gantry.gantry.config.predictions.filesDir, id)),
    close: () => gantry.close(),
  };
}

async function create(gantry: TestGantry): Promise<string> {
  const res = await fetch(`${gantry.origin}/v1/predictions`, {
    method: 'POST',
    headers: { 'x-api-key': gantry.key, 'content-type': 'application/json' },
    body: JSON.stringify({ model: IMAGE, input: { prompt: 'warm up', width: 64, height: 64 }, await: true }),
  });
  if (res.status !== 200) throw new Error(`create: ${res.status} ${await res.text()}`);
  return ((await res.json()) as { id: string }).id;
}

async function show(gantry: TestGantry, id: string): Promise<ShownPrediction> {
  const res = await fetch(`${gantry.origin}/v1/predictions/${id}`, { headers: { 'x-api-key': gantry.key } });
  if (res.status !== 200) throw new Error(`get: ${res.status} ${await res.text()}`);
  return (await res.json()) as ShownPrediction;
}

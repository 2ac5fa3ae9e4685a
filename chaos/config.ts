/**
 * The gantry.yaml the chaos run gives every Gantry process: the built-in image model only, webhooks to
 * 127.0.0.1 allowed, short webhook backoff. It is built as a plain object so a flag can add or change any
 * key (`--set predictions.concurrency=4`), including keys later versions of Gantry add.
 */
import { writeFileSync } from 'node:fs';
import { parse, stringify } from 'yaml';

export type ConfigTree = { [key: string]: unknown };

/** The fastest built-in prediction model: a small picture drawn by sharp, no external program. */
export const IMAGE_MODEL = 'gantry/local-image';

export function chaosConfig(filesDir: string): ConfigTree {
  return {
    server: { log_level: 'warn' },
    providers: { local: { kind: 'local' } },
    tiers: { default: {} },
    predictions: {
      files_dir: filesDir,
      webhooks: { allow_private: true, timeout_ms: 5000, backoff_base_ms: 200, backoff_max_ms: 2000 },
    },
    models: [
      {
        namespace: IMAGE_MODEL,
        name: 'Local image',
        type: 'image',
        vendor: { name: 'Gantry', slug: 'gantry' },
        serves: ['predictions'],
        routes: [{ provider: 'local', model: 'local-image' }],
      },
    ],
  };
}

/**
 * Applies one `--set path.to.key=value` to the tree; the value is read as YAML (`5`, `true`, `{a: 1}`),
 * and missing maps on the path are created.
 */
export function applySetting(tree: ConfigTree, setting: string): void {
  const eq = setting.indexOf('=');
  if (eq <= 0) throw new Error(`--set needs path=value, got "${setting}"`);
  const path = setting.slice(0, eq).split('.');
  const value: unknown = parse(setting.slice(eq + 1));
  let node = tree;
  for (const part of path.slice(0, -1)) {
    const next = node[part];
    if (typeof next !== 'object' || next === null || Array.isArray(next)) node[part] = {};
    node = node[part] as ConfigTree;
  }
  node[path[path.length - 1] as string] = value;
}

export function writeConfig(path: string, tree: ConfigTree): void {
  writeFileSync(path, stringify(tree));
}

#!/usr/bin/env -S node --max-semi-space-size=64
// The `gantry` command runs the compiled CLI (npm install builds it; `npm run build` rebuilds it).
// Node's flags are the ones `npm start` and the Dockerfile use (README, "Running it").
import { existsSync } from 'node:fs';

const entry = new URL('../dist/src/main.js', import.meta.url);
if (!existsSync(entry)) {
  process.stderr.write('gantry: dist/ is missing; run `npm run build` first\n');
  process.exit(1);
}
await import(entry.href);

#!/usr/bin/env node
// The `gantry` command runs the compiled CLI (npm install builds it; `npm run build` rebuilds it).
// A plain `env` shebang: `env -S` (for node flags) is missing from BusyBox and older coreutils. `npm start`
// and the Dockerfile give node Gantry's flags; NODE_OPTIONS does for this command (README).
import { existsSync } from 'node:fs';

const entry = new URL('../dist/src/main.js', import.meta.url);
if (!existsSync(entry)) {
  process.stderr.write('gantry: dist/ is missing; run `npm run build` first\n');
  process.exit(1);
}
await import(entry.href);

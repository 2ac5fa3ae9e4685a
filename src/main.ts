import { runCli } from './cli.js';

// A failed command exits at once: whatever it opened before failing (a Redis connection, a store) must
// not keep the process alive after its one-line error.
runCli(process.argv.slice(2)).then(
  (code) => {
    if (code !== 0) process.exit(code);
  },
  (err: unknown) => {
    process.stderr.write(`gantry: ${String(err)}\n`);
    process.exit(1);
  },
);

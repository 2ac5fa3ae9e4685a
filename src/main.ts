import { main } from './cli.js';

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
  },
  (err: unknown) => {
    process.stderr.write(`gantry: ${err instanceof Error ? err.stack : String(err)}\n`);
    process.exit(1);
  },
);

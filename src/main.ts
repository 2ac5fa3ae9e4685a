import { CliError, describeError, main } from './cli.js';

// Every error ends the command with one line naming the problem; LOG_LEVEL=debug adds the stack of an
// unexpected one.
main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
  },
  (err: unknown) => {
    process.stderr.write(`gantry: ${describeError(err)}\n`);
    const debug = process.env.LOG_LEVEL === 'debug' || process.env.LOG_LEVEL === 'trace';
    if (debug && !(err instanceof CliError) && err instanceof Error) process.stderr.write(`${err.stack}\n`);
    process.exit(err instanceof CliError ? err.exitCode : 1);
  },
);

// executor-proc entry: the effect side of custody (ARCHITECTURE.md §6.2). Started by
// the supervisor, one process per configured executor:
//   node dist/executor-proc/main.js --dir <state>/executors/<name>
//        --resources <state>/resources [--adapter <module>]...
// Adapter modules are named here, on the executor host's own command line,
// never on the wire. Everything else (session, mode, kernel pin, settings)
// arrives in the preamble on stdin. Exit codes: shared/child/runtime.ts CHILD_EXIT.
import '../shared/inspector-guard.js';
import { Command, CommanderError } from 'commander';
import { CHILD_EXIT } from '../shared/exit-codes.js';
import { runChild } from '../shared/child/runtime.js';
import { setupExecutor } from './service.js';

function parseArgs(argv: string[]): { dir: string; resources: string; adapters: string[] } {
  const program = new Command()
    .name('executor-proc')
    .description('custody executor: claims before effects, signed reports, byte-identical replay')
    .requiredOption('--dir <path>', 'the executor directory: executor.key, executor.pub, ledger.db, archive.db')
    .requiredOption('--resources <path>', 'the resources directory built-in adapters write in')
    .option('--adapter <module>', 'an adapter module to load (repeatable)', (value: string, all: string[]) => [...all, value], [] as string[])
    .exitOverride()
    .configureOutput({ writeOut: (text) => process.stderr.write(text), writeErr: (text) => process.stderr.write(text) })
    .parse(argv);
  const options = program.opts<{ dir: string; resources: string; adapter: string[] }>();
  return { dir: options.dir, resources: options.resources, adapters: options.adapter };
}

let args: ReturnType<typeof parseArgs>;
try {
  args = parseArgs(process.argv);
} catch (error) {
  process.exit(error instanceof CommanderError && error.exitCode === 0 ? 0 : CHILD_EXIT.usage);
}

const code = await runChild({
  role: 'executor',
  setup: (preamble, log, limits) =>
    setupExecutor(preamble, log, {
      maxFrameBytes: limits.maxFrameBytes,
      maxDepth: limits.maxDepth,
      dir: args.dir,
      resources: args.resources,
      adapterModules: args.adapters,
      exit: (exitCode) => process.exit(exitCode),
    }),
});
process.exit(code);

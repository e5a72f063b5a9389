// kernel-proc's entry point: `node dist/kernel-proc/main.js --dir <state>/kernel`.
// The supervisor spawns it and writes the session preamble (mode, settings)
// on its stdin; stdout carries frames only, so argv help and errors go to stderr.
import '../shared/inspector-guard.js';
import { Command } from 'commander';
import { CHILD_EXIT } from '../shared/exit-codes.js';
import { runChild } from '../shared/child/runtime.js';
import { setupKernel } from './setup.js';
import { errorFields } from '../shared/log.js';

const program = new Command()
  .name('kernel-proc')
  .description('custody kernel: grants, budgets, nonces, operations and signed receipts, served on stdio')
  .requiredOption('--dir <path>', 'the kernel state directory (kernel.key, kernel.pub, kernel.db)')
  .configureOutput({ writeOut: (text) => process.stderr.write(text), writeErr: (text) => process.stderr.write(text) })
  .exitOverride((error) => process.exit(error.exitCode === 0 ? 0 : CHILD_EXIT.usage))
  .parse(process.argv);

const { dir } = program.opts<{ dir: string }>();

const code = await runChild({
  role: 'kernel',
  setup: (preamble, log, limits) =>
    setupKernel({
      dir,
      preamble,
      log,
      maxFrameBytes: limits.maxFrameBytes,
      onStoreReplaced: (error) => {
        // store_replaced, or store_rolled_back for a kernel.db rewritten under this process.
        log.error(error.code, errorFields(error));
        setTimeout(() => process.exit(CHILD_EXIT.software), 50);
      },
    }),
});
process.exit(code);

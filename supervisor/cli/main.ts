#!/usr/bin/env node
// The `custody` command. Names, flags and exit codes are a contract
// (README "CLI reference"; the codes are CLI_EXIT in shared/exit-codes.ts).
// A client command loads what asks the service over HTTP and no more: the
// service, the stores and the metrics are imported by the commands that run
// them (start, init, an offline trace, mcp), so an agent calling `custody
// invoke` does not pay for them at every call (docs/PERFORMANCE.md "CLI start").
import { logIgnoredSignals } from '../../shared/inspector-guard.js';
import { Command, CommanderError, Option } from 'commander';
import { CustodyError, toCustodyError } from '../../shared/errors.js';
import { resolveStateDir, statePaths } from '../paths.js';
import { existsSync } from 'node:fs';
import { type ArgSource, argumentBoundFor, collectArg, parseAnswerTimeout, parseCount, parseDuration, parseName, parsePort, parseWait, parseWaitAtLeast1ms, resolveArguments } from './args.js';
import { connect } from './client.js';
import { CLI_EXIT } from '../../shared/exit-codes.js';
import { exitCodeForError } from './exit-codes.js';
import { createOutput } from './output.js';
import { authorizeCommand, executeCommand, invokeCommand, opsCommand, reportCommand, traceCommand } from './commands/operations.js';
import { archiveCommand, executorRotateCommand, kernelRotateCommand, recoverRollbackCommand, restartCommand, grantAddCommand, grantListCommand, grantRevokeCommand, receiptExportCommand, receiptVerifyCommand, statusCommand } from './commands/admin.js';
import { initCommand, startCommand } from './commands/service.js';
import { stderrSink } from '../../shared/log-sink.js';
import { createLogger } from '../../shared/log.js';

logIgnoredSignals((event, fields) => createLogger({ pid: process.pid, program: 'custody' }).warn(event, fields));

let exitCode: number = CLI_EXIT.done;
const setExit = (code: number): void => {
  exitCode = code;
};

const program = new Command('custody')
  .description('Runs side-effecting tool calls under separated authority: a kernel decides, executors act at most once.')
  .addOption(new Option('--state <dir>', 'state directory (default: $CUSTODY_STATE or ./custody-state)'))
  .addOption(new Option('--answer-timeout <duration>', 'how long a command waits for the service to answer, beyond its --wait (default 30s, at most 1d): a stopped or hung service then fails it').argParser(parseAnswerTimeout))
  .showHelpAfterError()
  .exitOverride();

const state = () => resolveStateDir(program.opts<{ state?: string }>().state);
const json = (options: { json?: boolean }) => createOutput(options.json === true);
const answerTimeoutMs = () => program.opts<{ answerTimeout?: number }>().answerTimeout;
const client = () => connect(state(), { answerTimeoutMs: answerTimeoutMs() });
/** The --arg values, files read under the tool's argument bound, before anything is sent. */
const argumentsOf = (tool: string, specs: Record<string, ArgSource>) => resolveArguments(specs, argumentBoundFor(state(), tool));

program
  .command('init')
  .description('provision a state directory: keys, stores, pins, default grant, tokens (from a custody.json already in it, if there is one)')
  .option('--state <dir>', 'state directory')
  .option('--executors <n>', 'number of executors', parseCount('--executors', 1), 1)
  .option('--json', 'machine-readable output')
  .option('--verbose', "also show the info lines of init's JSON log and of the children it provisions (default: warnings and errors only)")
  .action(async (options: { state?: string; executors: number; json?: boolean; verbose?: boolean }, command: Command) => {
    const stateDir = resolveStateDir(options.state ?? program.opts<{ state?: string }>().state);
    // A custody.json placed in the state names its executors itself: a count given as well would be passed over in silence.
    if (command.getOptionValueSource('executors') === 'cli' && existsSync(statePaths(stateDir).config)) {
      throw new CustodyError('usage', `${statePaths(stateDir).config} is there and names the executors; give --executors only for a state without one`);
    }
    setExit(await initCommand(json(options), stateDir, options.executors, options.verbose === true));
  });

program
  .command('start')
  .description('run the service in the foreground (initializes a missing or empty state first, or one holding only custody.json)')
  .option('--state <dir>', 'state directory')
  .option('--port <n>', 'control API port on 127.0.0.1 (overrides custody.json; 0 = any free port)', parsePort)
  .action(async (options: { state?: string; port?: number }) => {
    serving = true;
    setExit(await startCommand(resolveStateDir(options.state ?? program.opts<{ state?: string }>().state), options.port));
  });

program
  .command('restart')
  .description('restart a child now: a failed one at once (fresh restart intensity), a running one gracefully')
  .argument('<child>', 'the child name: kernel, or an executor name from custody status')
  .option('--json', 'machine-readable output')
  .action(async (name: string, options: { json?: boolean }) => setExit(await restartCommand(client(), json(options), name)));

program
  .command('status')
  .description('children with pid, state, restarts, uptime')
  .option('--json', 'machine-readable output')
  .action(async (options: { json?: boolean }) => setExit(await statusCommand(client(), json(options))));

const waitOption = () => new Option('--wait <duration>', 'how long to wait for the end before answering "not complete" (exit 4), at most 1h; the service carries on').argParser(parseWait);

const argOption = () => new Option('--arg <key=value>', 'an argument; KEY=@FILE reads the value from a file (repeatable)').argParser(collectArg).default({}, 'none');

program
  .command('invoke')
  .description('run a tool call end to end: reserve, start, execute, settle')
  .argument('<tool>', 'tool name, e.g. review-notes/append')
  .addOption(argOption())
  .addOption(new Option('--request-id <id>', 'idempotency key: the same id and arguments get the same answer').argParser(parseName('--request-id')))
  .addOption(waitOption())
  .option('--json', 'machine-readable output')
  .action(async (tool: string, options: { arg: Record<string, ArgSource>; requestId?: string; wait?: number; json?: boolean }) =>
    setExit(await invokeCommand(client(), json(options), tool, argumentsOf(tool, options.arg), options.requestId, options.wait)),
  );

program
  .command('authorize')
  .description('reserve and commit the start of an operation, without executing it')
  .argument('<tool>', 'tool name')
  .addOption(argOption())
  .addOption(new Option('--operation <name>', 'the operation name (its request id)').argParser(parseName('--operation')).makeOptionMandatory())
  .addOption(waitOption())
  .option('--json', 'machine-readable output')
  .action(async (tool: string, options: { arg: Record<string, ArgSource>; operation: string; wait?: number; json?: boolean }) =>
    setExit(await authorizeCommand(client(), json(options), tool, argumentsOf(tool, options.arg), options.operation, options.wait)),
  );

program
  .command('execute')
  .description('execute an authorized operation; repeating it replays the retained report')
  .argument('<name>', 'operation name', parseName('NAME'))
  .option('--drop-reply', 'lost-reply drill: the executor retains its report, then exits 75 without replying')
  .addOption(waitOption())
  .option('--json', 'machine-readable output')
  .action(async (name: string, options: { dropReply?: boolean; wait?: number; json?: boolean }) =>
    setExit(await executeCommand(client(), json(options), name, options.dropReply === true, options.wait)),
  );

program
  .command('report')
  .description("give the executor's signed report to the kernel; prints the output once the kernel has verified and settled it")
  .argument('<name>', 'operation name', parseName('NAME'))
  .addOption(waitOption())
  .option('--json', 'machine-readable output')
  .action(async (name: string, options: { wait?: number; json?: boolean }) => setExit(await reportCommand(client(), json(options), name, 'report', options.wait)));

program
  .command('reconcile')
  .description('ask the executor what became of an operation and settle it (never re-runs an effect)')
  .argument('<name>', 'operation name', parseName('NAME'))
  .addOption(waitOption())
  .option('--json', 'machine-readable output')
  .action(async (name: string, options: { wait?: number; json?: boolean }) => setExit(await reportCommand(client(), json(options), name, 'reconcile', options.wait)));

program
  .command('ops')
  .description('the newest 1000 operations, newest first (it says when there are more; custody export lists every one)')
  .option('--json', 'machine-readable output')
  .action(async (options: { json?: boolean }) => setExit(await opsCommand(client(), json(options))));

program
  .command('export')
  .description('every operation (read a page at a time, newest first) and the recent incidents, as NDJSON on stdout: one JSON object per line, tagged with its "record" (operation or incident)')
  .action(async () => {
    // ndjson and its streams are loaded for this command alone.
    const { exportCommand } = await import('./commands/export.js');
    setExit(await exportCommand(client()));
  });

program
  .command('trace')
  .description("an operation's timeline across the three stores (read from the stores, read-only, when the service is down)")
  .argument('<name>', 'operation name', parseName('NAME'))
  .option('--json', 'machine-readable output')
  .action(async (name: string, options: { json?: boolean }) => setExit(await traceCommand(client(), json(options), name)));

program
  .command('archive')
  .description("move settled operations whose window has passed out of each executor's live ledger, into its archive (the service also does every timing.archive_interval_ms)")
  .option('--json', 'machine-readable output')
  .action(async (options: { json?: boolean }) => setExit(await archiveCommand(client(), json(options))));

program
  .command('recover-rollback')
  .description('the way back for an executor refused with store_rolled_back after a backup was restored on purpose (docs/ROLLBACK.md)')
  .argument('<name>', 'executor name')
  .option('--json', 'machine-readable output')
  .action(async (name: string, options: { json?: boolean }) => setExit(await recoverRollbackCommand(client(), json(options), name)));

program
  .command('executor')
  .description('manage executors')
  .command('rotate')
  .description("rotate an executor's key: it makes the next key, the kernel pins it through a statement the old key signs (README \"Rotating keys\")")
  .argument('<name>', 'executor name')
  .option('--json', 'machine-readable output')
  .action(async (name: string, options: { json?: boolean }) => setExit(await executorRotateCommand(client(), json(options), name)));

program
  .command('kernel')
  .description('manage the kernel')
  .command('rotate')
  .description("rotate the kernel's key: it makes the next key; every executor re-pins it through a statement the old key signs")
  .option('--json', 'machine-readable output')
  .action(async (options: { json?: boolean }) => setExit(await kernelRotateCommand(client(), json(options))));

/** A repeatable option: every value, in order. */
function collect(value: string, previous: string[]): string[] {
  return [...previous, value];
}

const grant = program.command('grant').description('manage capability grants');
grant
  .command('add')
  .requiredOption('--tool <pattern>', 'tool name or prefix ending in /*')
  .requiredOption('--max <n>', 'maximum invocations', parseCount('--max', 1))
  .option('--cost-units <n>', 'maximum cost units', parseCount('--cost-units', 0))
  .requiredOption('--ttl <duration>', 'lifetime: 90s, 30m, 1h, 2d', parseDuration)
  .option('--json', 'machine-readable output')
  .action(async (options: { tool: string; max: number; costUnits?: number; ttl: number; json?: boolean }) =>
    setExit(await grantAddCommand(client(), json(options), options)),
  );
grant
  .command('list')
  .option('--live', 'only the grants neither expired nor revoked')
  .option('--json', 'machine-readable output')
  .action(async (options: { live?: boolean; json?: boolean }) => setExit(await grantListCommand(client(), json(options), options.live === true)));
grant
  .command('revoke')
  .argument('<id>', 'capability id')
  .option('--json', 'machine-readable output')
  .action(async (id: string, options: { json?: boolean }) => setExit(await grantRevokeCommand(client(), json(options), id)));

program
  .command('mcp')
  .description('serve the Model Context Protocol on stdio for an agent host, with the agent token: grants\' tools as MCP tools, each call one governed invoke')
  .option('--url <url>', 'service address, e.g. http://127.0.0.1:7410 (with --token-file; default: from --state)')
  .option('--token-file <file>', 'the agent token file (mode 0600); the control token is refused')
  .addOption(new Option('--wait <duration>', 'how long one call waits for its end before answering "not known yet" (at most 1h)').argParser(parseWaitAtLeast1ms))
  // Imported when used: the MCP SDK is not loaded by every other command.
  .action(async (options: { url?: string; tokenFile?: string; wait?: number }) => {
    const { mcpCommand } = await import('../mcp/command.js');
    setExit(await mcpCommand({ state: state(), url: options.url, tokenFile: options.tokenFile, waitMs: options.wait, answerTimeoutMs: answerTimeoutMs() }));
  });

const receipt = program.command('receipt').description('export and verify signed artifacts');
receipt
  .command('export')
  .argument('<name>', 'operation name', parseName('NAME'))
  .option('--out <dir>', 'directory to write to (default ./<name>-artifacts)')
  .option('--json', 'machine-readable output')
  .action(async (name: string, options: { out?: string; json?: boolean }) => setExit(await receiptExportCommand(client(), json(options), name, options.out)));
receipt
  .command('verify')
  .argument('<file>', 'an artifact file (exact signed bytes)')
  .option('--trusted-kernel-pubkey <file>', "a kernel .pub file (required; repeat it for several key epochs: kernel.e1.pub, kernel.e2.pub)", collect, [])
  .option('--trusted-executor-pubkey <file>', "an executor's .pub file, to verify a report (repeatable)", collect, [])
  .option('--json', 'machine-readable output')
  .action((file: string, options: { trustedKernelPubkey: string[]; trustedExecutorPubkey: string[]; json?: boolean }) =>
    setExit(receiptVerifyCommand(json(options), file, options)),
  );

/**
 * A write to a stdout whose reader has gone (`custody export | head`): what
 * a Unix tool ended by SIGPIPE does, quietly. Not the service: its stdout
 * carries one line, and no failure to write it stops anything.
 */
const outputClosed = (error: unknown): boolean => (error as NodeJS.ErrnoException | null)?.code === 'EPIPE';
let serving = false;
// stderr is the service's log: a reader that left (EPIPE) or stopped reading never ends the process or swells it (shared/log-sink.ts).
stderrSink();
process.stdout.on('error', (error: NodeJS.ErrnoException) => {
  // The service's stdout carries one line ("custody is running"): a stdout that cannot take it (/dev/full, a log
  // file on a full disk) is said on stderr, a reader gone is not, and neither ends the service (the first was a
  // crash loop under a supervisor whose log disk filled).
  if (serving) {
    if (outputClosed(error)) return;
    createLogger({ pid: process.pid, program: 'custody' }).warn('stdout_unwritable', { code: error.code ?? null, message: error.message });
    return;
  }
  if (!outputClosed(error)) throw error;
  process.exit(CLI_EXIT.outputClosed);
});

try {
  await program.parseAsync(process.argv);
} catch (error) {
  if (outputClosed(error)) {
    exitCode = CLI_EXIT.outputClosed;
  } else if (error instanceof CommanderError) {
    exitCode = error.exitCode === 0 ? 0 : CLI_EXIT.usage;
  } else {
    const failure = toCustodyError(error);
    process.stderr.write(`custody: ${failure.message} [${failure.code}]\n`);
    exitCode = exitCodeForError(failure.code);
  }
}
process.exit(exitCode);

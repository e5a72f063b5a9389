// The long-running processes (the supervisor's `custody start`, and the
// kernel, the executor and the adapter host while they serve) let V8
// optimize their hot code after a quarter of the work its default asks for.
// Each operation runs most of its functions once, so with the default
// budget a service runs partly in the interpreter and the baseline compiler
// for the first few thousand operations after every start, and a restart
// (the recovery custody exists for) starts that over. Measured in
// docs/PERFORMANCE.md "Stop 28: optimized sooner". Set once a process
// serves, not before: its start (and a provisioning run, and every CLI
// command) keeps V8's default and Node's own code cache, which a changed
// flag would no longer match for the modules loaded after it.
import v8 from 'node:v8';

/**
 * V8's interrupt budget (bytecode executed between tier-up checks; 67,584 by
 * default in Node 20): a function is optimized after executing about this
 * much, a few times over.
 */
export const INTERRUPT_BUDGET = 16_384;

/**
 * Only V8 11 (Node 20, 21) decides tier-up by this budget; later versions
 * count calls and no longer know the flag, and setting an unknown flag
 * prints to stderr, which a child keeps for its log alone (docs/PROTOCOL.md).
 */
const BUDGET_DECIDES_TIERING = process.versions.v8.split('.')[0] === '11';

/**
 * Lower the budget, unless the process was started with one of its own
 * (`node --interrupt-budget=…` in a custom argv, or `bench:ab --node-flags`).
 * V8 reads the budget each time it resets a function's counter, so a flag
 * set at run time acts as one given on the command line, which NODE_OPTIONS
 * does not accept. Whether the budget was set.
 */
export function optimizeSooner(): boolean {
  if (!BUDGET_DECIDES_TIERING || hasOwnBudget(process.execArgv)) return false;
  v8.setFlagsFromString(`--interrupt-budget=${INTERRUPT_BUDGET}`);
  return true;
}

/**
 * Whether node flags set the budget: `--interrupt-budget=N`, with dashes or
 * underscores as V8 takes either; not the other flags whose names begin the
 * same (`--interrupt-budget-for-feedback-allocation`, …).
 */
export function hasOwnBudget(execArgv: readonly string[]): boolean {
  return execArgv.some((arg) => /^--interrupt[-_]budget=/.test(arg));
}

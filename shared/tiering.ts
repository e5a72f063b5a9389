// The long-running processes (the supervisor's `custody start`, the kernel,
// the executor, the adapter host) let V8 optimize their hot code after a
// quarter of the work its default asks for. Each operation runs most of its
// functions once, so with the default budget a service runs partly in the
// interpreter and the baseline compiler for the first few thousand
// operations after every start, and a restart (the recovery custody exists
// for) starts that over. Measured in docs/PERFORMANCE.md "Stop 28: optimized
// sooner". Short-lived CLI commands keep the default: they would pay for
// compiling code they never run again.
import v8 from 'node:v8';

/**
 * V8's interrupt budget (bytecode executed between tier-up checks; Node 20's
 * default is 67,584): a function is optimized after executing about this
 * much, times V8's ticks-before-optimization.
 */
export const INTERRUPT_BUDGET = 16_384;

/**
 * Set at the start of a program, before its hot code runs. V8 reads the
 * budget each time it resets a function's counter, so a flag set at run time
 * acts as one given on the command line (`node --interrupt-budget=…`, which
 * NODE_OPTIONS does not accept).
 */
export function optimizeSooner(): void {
  v8.setFlagsFromString(`--interrupt-budget=${INTERRUPT_BUDGET}`);
}

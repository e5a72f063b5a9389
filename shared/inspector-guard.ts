// Every custody program imports this module first, for its side effect.
//
// Node opens its inspector when a process receives SIGUSR1: a debugger
// endpoint on 127.0.0.1:9229 with no authentication, whose address any local
// user reads from http://127.0.0.1:9229/json/list. Whoever connects runs code
// in the process: the kernel's signing key, the executor's ledger and key,
// the tokens the supervisor and `custody mcp` hold. A stray SIGUSR1 (a
// rotation script's "reopen your logs", `kill -USR1` aimed at another
// process) would open it (docs/SECURITY.md, "Signals").
//
// A SIGUSR1 listener keeps Node from opening the inspector (Node 20; Node
// 22.14 adds --disable-sigusr1). It is installed as this module is
// evaluated: the module imports nothing, and the bundles load it before any
// other code (scripts/bundle.ts keeps it a file of its own, imported first
// by each program). It only logs, once the program has a log
// (`logIgnoredSignals`): custody writes its log to stderr and has nothing to
// reopen. To profile or debug a child, put --cpu-prof or --inspect in its
// argv (kernel.argv, executors[].argv), where the operator chose it.

type Warn = (event: string, fields: Record<string, unknown>) => void;

let warn: Warn | null = null;

process.on('SIGUSR1', () => {
  warn?.('signal_ignored', {
    signal: 'SIGUSR1',
    message: "SIGUSR1 would open Node's inspector, through which any local user could run code in this process; custody ignores it. Its log is on stderr and has nothing to reopen; to debug or profile a child, set --inspect or --cpu-prof in its argv.",
  });
});

/** Say so in the log each time SIGUSR1 is ignored from now on (before a program has its log, it is ignored silently). */
export function logIgnoredSignals(log: Warn): void {
  warn = log;
}

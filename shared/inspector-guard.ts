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
// 22.14 adds --disable-sigusr1). The listener is installed as this module is
// evaluated, before the rest of the program loads, and only logs: custody
// writes its log to stderr and has nothing to reopen. To profile or debug a
// child, put --cpu-prof or --inspect in its argv (kernel.argv,
// executors[].argv), where the operator chose it.
import path from 'node:path';
import { createLogger } from './log.js';

const program = path.basename(process.argv[1] ?? 'node', '.js');

process.on('SIGUSR1', () => {
  createLogger({ pid: process.pid, program }).warn('signal_ignored', {
    signal: 'SIGUSR1',
    message: 'SIGUSR1 would open Node\'s inspector, through which any local user could run code in this process; custody ignores it. Its log is on stderr and has nothing to reopen; to debug or profile a child, set --inspect or --cpu-prof in its argv.',
  });
});

// Every exit status custody's processes end with, in one place. The
// children's are sysexits.h numbers (docs/PROTOCOL.md §10 says what each
// means on stdout and stderr); the CLI's are a contract scripts branch on
// (README "Exit codes"). Nothing else writes an exit status as a number.

/** A kernel or executor child, and the executor's adapter host. */
export const CHILD_EXIT = {
  ok: 0,
  usage: 64, //     EX_USAGE: a bad command line; nothing is read or written on the channel
  preamble: 65, //  EX_DATAERR: no usable preamble
  software: 70, //  EX_SOFTWARE: the channel was poisoned
  dropReply: 75, // EX_TEMPFAIL: the lost-reply drill (the report retained, the answer not sent)
  config: 78, //    EX_CONFIG: setup refused (store, key, pins)
} as const;

/** The custody CLI, and the foreground service (`custody start`). */
export const CLI_EXIT = {
  done: 0,
  error: 1,
  usage: 2,
  refused: 3,
  unknown: 4,
  unreachable: 5,
  /** `execute --drop-reply`: the executor exited with the drill's status, and so does the CLI. */
  replyDropped: CHILD_EXIT.dropReply,
  /** Its reader closed stdout (`custody export | head`): 128 + SIGPIPE, as a tool the signal ended. */
  outputClosed: 141,
} as const;

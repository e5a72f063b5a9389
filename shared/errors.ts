// One error type for the whole system. Codes are part of the protocol: they
// cross the wire as `{code, message}`, reach HTTP clients and decide the CLI's
// exit code, so a code, once published, keeps its meaning. Each entry says
// which outcome class it belongs to; the CLI and the HTTP API derive their
// answers from that class, never from the code's spelling.
import { WIRE_ERROR_MESSAGE_MAX, cutText } from './text/cut.js';

/** How a failure looks from outside: the CLI exit code and HTTP status follow from it. */
export type ErrorClass =
  | 'usage' //          the caller asked wrongly (CLI 2, HTTP 400)
  | 'refused' //        a rule said no; retrying the same thing will not help (CLI 3, HTTP 403/409)
  | 'unknown' //        the outcome is not known or not complete yet (CLI 4, HTTP 409)
  | 'unreachable' //    a process or the service cannot be reached (CLI 5, HTTP 503)
  | 'not_found' //      the named thing does not exist (CLI 1, HTTP 404)
  | 'auth' //           missing or wrong credentials (CLI 1, HTTP 401)
  | 'protocol' //       a peer broke the wire rules; the channel is discarded (CLI 1, HTTP 502)
  | 'internal'; //      a fault in custody or its environment (CLI 1, HTTP 500)

const CODES = {
  // wire: framing
  frame_too_large: { class: 'protocol', summary: 'a frame exceeded the byte bound before its newline' },
  frame_malformed: { class: 'protocol', summary: 'a frame is not strict UTF-8 JSON with an object at top level' },
  frame_too_deep: { class: 'protocol', summary: 'a frame nests deeper than the nesting bound' },
  schema_violation: { class: 'protocol', summary: 'a message does not match the closed schema of its kind' },
  // wire: session
  preamble_too_large: { class: 'protocol', summary: 'the session preamble exceeded its byte bound' },
  preamble_malformed: { class: 'protocol', summary: 'the session preamble is not a valid preamble line' },
  bad_mac: { class: 'protocol', summary: 'a frame failed its HMAC check' },
  frame_reflected: { class: 'protocol', summary: 'a frame came back to the process that sent it' },
  wrong_session: { class: 'protocol', summary: 'a frame names a session other than the channel' },
  bad_sequence: { class: 'protocol', summary: 'a frame sequence number was repeated, skipped or reordered' },
  wrong_sender: { class: 'protocol', summary: 'a frame names a sender role the channel does not expect' },
  hello_invalid: { class: 'protocol', summary: 'the child identity proof (hello) does not verify' },
  identity_mismatch: { class: 'refused', summary: 'a process identity differs from the pinned one' },
  unexpected_message: { class: 'protocol', summary: 'a message arrived that the receiver cannot accept in its state' },
  channel_poisoned: { class: 'unreachable', summary: 'the channel was discarded after a protocol error' },
  channel_closed: { class: 'unreachable', summary: 'the channel closed before an answer arrived' },
  peer_exited: { class: 'unreachable', summary: 'the peer process exited' },
  descriptors_exhausted: { class: 'unreachable', summary: 'a child could not be started: the supervisor (or the system) has no file descriptors left for its pipes; retried at the longest backoff, never counted toward the child failing' },
  processes_exhausted: { class: 'unreachable', summary: 'a child or an adapter host could not be started: the system refused a new process (a limit on processes or threads); retried at the longest backoff, never counted toward the child failing' },
  service_busy: { class: 'unreachable', summary: 'the supervisor carries as many requests or reads as its bounds allow (bounds.max_requests_in_flight, max_reads_in_flight, a child\'s channel); nothing was recorded or done for this one: ask again in a moment with the same request id' },
  duplicate_request: { class: 'protocol', summary: 'a request id is already pending on this channel' },
  too_many_in_flight: { class: 'refused', summary: 'the bound on requests in flight is reached' },
  // artifacts and keys
  artifact_malformed: { class: 'refused', summary: 'a signed artifact does not match its schema' },
  artifact_too_large: { class: 'refused', summary: 'a signed artifact exceeds its size cap' },
  artifact_too_deep: { class: 'refused', summary: 'a signed artifact nests deeper than 24 levels (its output included); none is signed' },
  artifact_noncanonical: { class: 'refused', summary: 'a signed artifact is not in canonical (RFC 8785) form' },
  signature_invalid: { class: 'refused', summary: 'a signature does not verify under the strict policy' },
  signer_untrusted: { class: 'refused', summary: 'an artifact is signed by a key that is not pinned' },
  key_invalid: { class: 'refused', summary: 'a key is malformed, non-canonical or of small order' },
  key_file_invalid: { class: 'internal', summary: 'a key file is missing, unreadable, loose or malformed' },
  canonical_unsupported: { class: 'usage', summary: 'a value cannot be canonicalized (non-finite number, lone surrogate, non-plain object)' },
  // stores
  store_permissions: { class: 'internal', summary: 'a store directory or file is not private to its owner, or not writable by it' },
  store_exists: { class: 'refused', summary: 'provisioning refused: the store already exists' },
  store_missing: { class: 'internal', summary: 'the store does not exist; provision it first' },
  store_locked: { class: 'refused', summary: 'another process holds the store lock' },
  store_lock_lost: { class: 'internal', summary: 'the store lock is no longer held; writing stopped' },
  store_schema: { class: 'internal', summary: 'the store schema is unknown or newer than this build' },
  store_identity: { class: 'internal', summary: 'the store file is not the one provisioned (copied, swapped or changed identity)' },
  store_corrupt: { class: 'internal', summary: 'a store guard refused a write (immutable or insert-once row), or SQLite found a store file damaged' },
  // kernel decisions
  capability_invalid: { class: 'refused', summary: 'the capability is malformed or its signature does not verify' },
  capability_expired: { class: 'refused', summary: 'the capability has expired' },
  capability_not_yet_valid: { class: 'refused', summary: 'the capability is not valid yet' },
  capability_revoked: { class: 'refused', summary: 'the capability was revoked' },
  capability_unknown: { class: 'refused', summary: 'no capability grants this tool' },
  tool_not_granted: { class: 'refused', summary: 'the capability does not cover this tool' },
  subject_not_granted: { class: 'refused', summary: 'the capability is granted to another subject' },
  tool_unknown: { class: 'refused', summary: 'no executor serves this tool' },
  arguments_invalid: { class: 'refused', summary: 'the arguments do not match the tool schema' },
  arguments_too_large: { class: 'refused', summary: 'the arguments exceed their bound' },
  budget_exhausted: { class: 'refused', summary: 'the capability budget is used up' },
  cost_exceeded: { class: 'refused', summary: 'the realized cost exceeds the budget hold' },
  nonce_unknown: { class: 'refused', summary: 'the execution nonce does not exist' },
  nonce_expired: { class: 'refused', summary: 'the execution nonce has expired' },
  nonce_reused: { class: 'refused', summary: 'the execution nonce was already used' },
  nonce_store_full: { class: 'refused', summary: 'the execution nonce store is full' },
  arguments_changed: { class: 'refused', summary: 'the arguments differ from the ones reserved' },
  request_conflict: { class: 'refused', summary: 'the request id was used with different request bytes' },
  operation_unknown: { class: 'not_found', summary: 'no such operation' },
  operation_terminal: { class: 'refused', summary: 'the operation is in a terminal state' },
  illegal_transition: { class: 'internal', summary: 'a state machine refused a transition' },
  history_full: { class: 'refused', summary: 'the retained history of an operation reached its bound' },
  executor_unknown: { class: 'refused', summary: 'the executor is not pinned' },
  epoch_stale: { class: 'refused', summary: 'the executor key epoch is older than the pinned one' },
  report_invalid: { class: 'refused', summary: 'the report does not verify or does not belong to the authorization' },
  report_outside_window: { class: 'refused', summary: 'the report claim fell outside the execution window' },
  authorization_invalid: { class: 'refused', summary: 'the dispatch authorization does not verify' },
  // executor
  not_addressed_to_me: { class: 'refused', summary: 'the authorization names another executor, key or epoch' },
  invocation_mismatch: { class: 'refused', summary: 'the authorization does not bind the expected invocation' },
  window_not_open: { class: 'refused', summary: 'the authorization execution window has not opened yet (now < not_before); the same execute may succeed once it opens' },
  outside_window: { class: 'refused', summary: 'the authorization execution window has closed (now ≥ expires_at); it can never be claimed' },
  outcome_unknown: { class: 'unknown', summary: 'a claim exists with no report; the outcome is unknown and nothing is re-run' },
  never_claimed: { class: 'refused', summary: 'the authorization was closed as never claimed' },
  ledger_full: { class: 'refused', summary: 'the ledger has no room for another claim' },
  ledger_missing: { class: 'internal', summary: 'the ledger does not exist; provision it first' },
  ledger_identity: { class: 'internal', summary: 'the ledger belongs to another identity' },
  adapter_unknown: { class: 'refused', summary: 'no adapter serves this tool' },
  adapter_contract_missing: { class: 'refused', summary: 'the adapter declares no contract and cannot run' },
  adapter_failed: { class: 'refused', summary: 'the adapter failed before its effect' },
  operation_fenced: { class: 'refused', summary: 'the operation key was fenced by reconciliation' },
  indeterminate: { class: 'unknown', summary: 'the adapter cannot tell whether the effect happened' },
  adapter_still_running: { class: 'unknown', summary: 'the adapter passed its deadline and is still running; the outcome is unknown' },
  reconcile_budget_exhausted: { class: 'refused', summary: 'the rate bound on adapter reconciliations for this tool or session is reached; the message says when the next is allowed' },
  not_cancellable: { class: 'refused', summary: 'the adapter cannot be cancelled' },
  shutting_down: { class: 'unreachable', summary: 'the process is shutting down and accepts no new work' },
  // supervisor, API, CLI
  deadline_exceeded: { class: 'unknown', summary: 'the deadline passed before an answer' },
  unauthorized: { class: 'auth', summary: 'missing or wrong bearer token' },
  forbidden: { class: 'auth', summary: 'the token may not use this endpoint' },
  not_found: { class: 'not_found', summary: 'no such resource' },
  bad_request: { class: 'usage', summary: 'the request is malformed' },
  body_too_large: { class: 'usage', summary: 'the request body exceeds its bound' },
  config_invalid: { class: 'usage', summary: 'the configuration is invalid' },
  state_exists: { class: 'refused', summary: 'the state directory is already initialized' },
  service_unavailable: { class: 'unreachable', summary: 'the service is not running or not reachable' },
  child_failed: { class: 'unreachable', summary: 'a child exceeded its restart intensity and was marked failed' },
  reply_dropped: { class: 'unknown', summary: 'the executor retained its report and exited without replying (lost-reply drill)' },
  usage: { class: 'usage', summary: 'the command line is wrong' },
  internal: { class: 'internal', summary: 'an internal error; see the log' },
  // issue 9, locks and restarts: the executor's own argument-check timeout, distinct from the supervisor's deadline
  argument_check_timeout: { class: 'refused', summary: "the adapter did not check the arguments within the tool's deadline; nothing was claimed" },
  // hostile input at the API and CLI boundary (issue 8: bounds, names, strict bytes)
  method_not_allowed: { class: 'usage', summary: 'the HTTP method is not served on this path (HTTP 405)' },
  target_invalid: { class: 'usage', summary: 'the HTTP request target is malformed (bytes, percent-encoding or form)' },
  name_invalid: { class: 'usage', summary: 'a request id or operation name is outside its charset or length (letters, digits, - _ . :, at most 128, no leading dot)' },
  encoding_invalid: { class: 'usage', summary: 'bytes that must be UTF-8 are not; the message gives the byte offset' },
  body_too_deep: { class: 'usage', summary: 'the request body nests deeper than its bound' },
  file_too_large: { class: 'usage', summary: 'a file named on the command line exceeds its bound; nothing past the bound was read' },
  // issue 8: poison pills and a full disk (docs/POISON-AND-DISK.md)
  request_quarantined: { class: 'unknown', summary: 'the request crashed or poisoned a child twice and is parked; it is not retried until an operator releases it' },
  storage_full: { class: 'unknown', summary: 'a store or file could not be written: its filesystem is full; free space, then ask again with the same name' },
  store_busy: { class: 'unknown', summary: 'a store stayed locked by another connection (an open write transaction, such as one in the sqlite3 shell) past its busy timeout; end that transaction, then ask again with the same name' },
  // Store rollback (issue 8, item 2): a witness outside each store.
  // Class unknown (exit 4), not refused (exit 3): what the refused store would have answered is not known, and 3 reads as "ended without effect".
  store_rolled_back: { class: 'unknown', summary: "a store's head is below the head the supervisor witnessed (restored from an older copy, or its last writes lost): it is refused; outcomes it would answer for are unknown" },
  store_replaced: { class: 'internal', summary: 'the store path no longer names the file this process opened (renamed or replaced while running)' },
  head_unwitnessed: { class: 'unknown', summary: 'the supervisor did not acknowledge a claim head before the deadline; the effect was not run' },
  // issue 11 items 4-6: executor pools, metrics, offline trace
  executor_unavailable: { class: 'unreachable', summary: 'no executor that serves the tool is running (all failed or restarting) within timing.executor_wait_ms' },
  // issue 11 items 1-3: key rotation of executors and the kernel (docs/SECURITY.md, "Rotating keys")
  epoch_retired: { class: 'refused', summary: 'the authorization names an executor key epoch, or is signed by a kernel key epoch, that a rotation retired before it was claimed; the executor refused it with a signed report and its hold is released' },
  rotation_invalid: { class: 'refused', summary: 'a key rotation statement does not verify under the pinned key, or does not move the pinned epoch forward by exactly one' },
  rotation_in_progress: { class: 'refused', summary: 'a key rotation is already under way in this process; ask again once it is answered' },
  kernel_key_unpinned: { class: 'refused', summary: 'an authorization is signed by a kernel key this executor has not pinned; nothing was claimed. After a kernel rotation, the kernel\'s statements (kernel.rotated) reach the executor and it is asked again' },
  epoch_unpinned: { class: 'unknown', summary: 'a report is signed under an executor key epoch the kernel has not pinned yet; the rotation statement must reach the kernel first' },
} as const satisfies Record<string, { class: ErrorClass; summary: string }>;

export type ErrorCode = keyof typeof CODES;

export const ERROR_CODES: readonly ErrorCode[] = Object.keys(CODES) as ErrorCode[];

export function isErrorCode(value: unknown): value is ErrorCode {
  return typeof value === 'string' && Object.hasOwn(CODES, value);
}

export function classOf(code: ErrorCode): ErrorClass {
  return CODES[code].class;
}

export function summaryOf(code: ErrorCode): string {
  return CODES[code].summary;
}

/** What crosses a process boundary: a stable code and a human message, nothing internal. */
export interface WireError {
  code: ErrorCode;
  message: string;
}

export class CustodyError extends Error {
  override readonly name = 'CustodyError';
  readonly code: ErrorCode;
  /**
   * The client request a failure is about, once the service has logged it:
   * the control API's error body names it (`request_id`), so a client that
   * sent none can ask again by it instead of sending a new request.
   */
  requestId?: string;

  constructor(code: ErrorCode, message?: string, options?: { cause?: unknown }) {
    super(message ?? summaryOf(code), options);
    this.code = code;
  }

  get errorClass(): ErrorClass {
    return classOf(this.code);
  }

  /** The wire's form: the message cut to what every receiver accepts (WIRE_ERROR_MESSAGE_MAX code points, well-formed), so a long one never breaks the channel it is sent on. */
  toWire(): WireError {
    return { code: this.code, message: cutText(this.message, WIRE_ERROR_MESSAGE_MAX) };
  }

  /** Rebuild the typed error on the receiving side; an unknown code is a protocol fault of the peer. */
  static fromWire(value: unknown): CustodyError {
    if (typeof value === 'object' && value !== null) {
      const { code, message } = value as Record<string, unknown>;
      if (isErrorCode(code) && typeof message === 'string') return new CustodyError(code, message);
    }
    return new CustodyError('schema_violation', 'peer sent an error without a known code');
  }
}

export function isCustodyError(value: unknown, code?: ErrorCode): value is CustodyError {
  return value instanceof CustodyError && (code === undefined || value.code === code);
}

/** Wrap anything thrown into a CustodyError, keeping the original as `cause`. */
export function toCustodyError(value: unknown, fallback: ErrorCode = 'internal'): CustodyError {
  if (value instanceof CustodyError) return value;
  const message = value instanceof Error ? value.message : String(value);
  if (isStorageFull(value)) return new CustodyError('storage_full', describeStorageFull(value, message), { cause: value });
  if (isStoreBusy(value)) return new CustodyError('store_busy', busyDescriber ? busyDescriber(message) : `a store is locked by another connection (${message}); end its transaction, then ask again with the same name`, { cause: value });
  if (isStoreDamaged(value)) {
    // Typically a file overwritten under its running process (docs/ROLLBACK.md, "What is and is not detected").
    return new CustodyError(
      'store_corrupt',
      `SQLite found a store file damaged (${message}): stop the service, check each store with sqlite3 FILE 'PRAGMA integrity_check', and put back the newest good copy (docs/ROLLBACK.md)`,
      { cause: value },
    );
  }
  return new CustodyError(fallback, message, { cause: value });
}

/** SQLite's SQLITE_BUSY (also as an extended code): another connection kept the lock past the busy timeout. */
export function isStoreBusy(value: unknown): boolean {
  if (value instanceof CustodyError) return value.code === 'store_busy';
  if (typeof value !== 'object' || value === null) return false;
  const code = (value as { code?: unknown }).code;
  return typeof code === 'string' && (code === 'SQLITE_BUSY' || code.startsWith('SQLITE_BUSY_'));
}

/** SQLite's SQLITE_CORRUPT (also as an extended code) or SQLITE_NOTADB: a file it cannot read as the database it was. */
export function isStoreDamaged(value: unknown): boolean {
  if (typeof value !== 'object' || value === null || value instanceof CustodyError) return false;
  const code = (value as { code?: unknown }).code;
  return typeof code === 'string' && (code.startsWith('SQLITE_CORRUPT') || code === 'SQLITE_NOTADB');
}

/** SQLite's SQLITE_FULL (also as an extended code) or ENOSPC/EDQUOT from a file write. */
export function isStorageFull(value: unknown): boolean {
  if (value instanceof CustodyError) return value.code === 'storage_full';
  if (typeof value !== 'object' || value === null) return false;
  const code = (value as { code?: unknown }).code;
  return typeof code === 'string' && (code === 'ENOSPC' || code === 'EDQUOT' || code.startsWith('SQLITE_FULL'));
}

/**
 * Names what could not be written. A store registers itself when it opens
 * (`registerStorageDescriber`), so a bare SQLITE_FULL is described with the
 * process's stores, their sizes and the room left on their filesystems.
 */
let storageDescriber: ((cause: string) => string) | null = null;

export function registerStorageDescriber(describe: (cause: string) => string): void {
  storageDescriber = describe;
}

/** Likewise for SQLITE_BUSY, which does not say which database was locked either. */
let busyDescriber: ((cause: string) => string) | null = null;

export function registerBusyDescriber(describe: (cause: string) => string): void {
  busyDescriber = describe;
}

function describeStorageFull(value: unknown, message: string): string {
  const path = (value as { path?: unknown }).path;
  if (typeof path === 'string') return `cannot write ${path}: its filesystem is full (${message}); free space there, then ask again with the same name`;
  return storageDescriber ? storageDescriber(message) : `a store could not be written: its filesystem is full (${message}); free space, then ask again with the same name`;
}

/**
 * A process that could not be started for a limit outside it, or null: out
 * of file descriptors for its pipes (EMFILE, ENFILE) or out of processes
 * (fork EAGAIN). Said alike by the supervisor starting a child
 * (shared/child/spawn.ts) and an executor starting its adapter host; both
 * are tried again at the longest restart backoff, never counted toward the
 * child failing (supervisor/children/restart-book.ts). `cannot` says what
 * could not be started.
 */
export function limitRefusal(cannot: string, error: NodeJS.ErrnoException): CustodyError | null {
  switch (error.code) {
    case 'EMFILE':
    case 'ENFILE': {
      const whose = error.code === 'ENFILE' ? 'the system has' : `process ${process.pid} has`;
      return new CustodyError(
        'descriptors_exhausted',
        `${cannot}: ${whose} no file descriptors left for its pipes (${error.code}); tried again at the longest restart backoff until some are free — see what holds them (ls /proc/${process.pid}/fd) or raise the limit (ulimit -n, LimitNOFILE=)`,
        { cause: error },
      );
    }
    case 'EAGAIN':
      return new CustodyError(
        'processes_exhausted',
        `${cannot}: the system refused a new process (EAGAIN): a limit on processes or threads is reached (ulimit -u / LimitNPROC=, a container's or cgroup's pids.max, kernel.threads-max); tried again at the longest restart backoff until one is free — see what runs (ps -eLf) or raise the limit`,
        { cause: error },
      );
    default:
      return null;
  }
}

// custody.json: the service's configuration, in the state directory. One
// closed schema with a default for every key, so an empty object is a
// complete configuration; a wrong key or value is refused with a message
// naming the key and the value.
import { z } from 'zod';
import { identifier, toolPattern } from '../../shared/protocol/common.js';
import { EXECUTOR_TOOLS_MAX } from '../../shared/protocol/kernel-messages.js';

const millis = (max: number) => z.number().int().min(1).max(max);

/**
 * How much longer an executor lets an adapter run than the supervisor's
 * watchdog waits: the watchdog must be the one that fires (and kills), the
 * executor's own deadline is only the backstop.
 */
export const ADAPTER_DEADLINE_MARGIN_MS = 5_000;

/** The largest watchdog deadline: a day, less ADAPTER_DEADLINE_MARGIN_MS (the executor's settings stop at a day). */
export const DEADLINE_MAX_MS = 86_400_000 - ADAPTER_DEADLINE_MARGIN_MS;

export const restartPolicySchema = z.strictObject({
  /** Restarts allowed within `period_s` before the child is marked failed (OTP intensity). */
  max_restarts: z.number().int().min(0).max(1000).default(5),
  period_s: z.number().int().min(1).max(86_400).default(60),
  /** First backoff; doubles with each restart inside the period, capped at backoff_max_ms. */
  backoff_initial_ms: millis(60_000).default(200),
  backoff_max_ms: millis(600_000).default(10_000),
  /** A failed executor is started again (with a fresh intensity) this long after it failed; `custody restart` does it at once. */
  failed_cooldown_s: z.number().int().min(1).max(86_400).default(300),
  /**
   * Crashes of a child (exits on its own, poisonings, missed heartbeats)
   * with a request in flight on it, after which that request is quarantined
   * and the crash no longer counts toward the child's intensity.
   */
  quarantine_after_crashes: z.number().int().min(1).max(100).default(2),
});

export const executorSchema = z.strictObject({
  name: identifier,
  /**
   * The command that runs this executor; any command that speaks the wire on
   * stdio (`ssh -T host custody-executor …`). Default: this build's own
   * executor entry point on this machine's state directory.
   */
  argv: z.array(z.string().min(1)).min(1).nullable().default(null),
  /** Tools this executor serves (names or prefixes ending in /*), at most 256 (the kernel's `executor.pin`). */
  tools: z.array(toolPattern).min(1).max(EXECUTOR_TOOLS_MAX).default(['review-notes/*']),
  /** Adapter modules for the default argv (`--adapter`), resolved from the state directory. */
  adapters: z.array(z.string().min(1)).default([]),
  /**
   * Watchdog deadline per tool (ms); `*` is the default for tools not listed.
   * At most a day less the 5 s the executor's own deadline runs past it
   * (supervisor/children/specs.ts), which must stay within the executor's day.
   */
  deadlines_ms: z.record(z.string(), millis(DEADLINE_MAX_MS)).default({ '*': 30_000 }),
  /** Requests in flight on this executor's channel. */
  max_in_flight: z.number().int().min(1).max(1024).default(64),
  /** Claims the ledger holds (set at provisioning). */
  claim_capacity: z.number().int().min(16).max(10_000_000).default(50_000),
  key_epoch: z.number().int().min(1).default(1),
  /** Extra settings handed to the executor in its preamble (its own bounds). */
  settings: z.record(z.string(), z.json()).default({}),
});
export type ExecutorConfig = z.infer<typeof executorSchema>;

export const kernelSchema = z.strictObject({
  argv: z.array(z.string().min(1)).min(1).nullable().default(null),
  /** Settings handed to the kernel in its preamble (nonce TTL, bounds…). */
  settings: z.record(z.string(), z.json()).default({}),
});

export const boundsSchema = z.strictObject({
  /**
   * Frame bound for every channel (bytes, at most 1 MiB). At least 128 KiB:
   * an authorization (32 KiB) travels escaped inside frames, which can
   * double it, and executors fit their reports to the bound.
   */
  max_frame_bytes: z.number().int().min(128 * 1024).max(1024 * 1024).default(1024 * 1024),
  max_depth: z.number().int().min(4).max(32).default(32),
  /** HTTP request body bound. */
  max_body_bytes: z.number().int().min(1024).max(1024 * 1024).default(256 * 1024),
  /**
   * Connections the API holds open at once; past it a new one is closed as
   * soon as it is accepted (supervisor/api/connections.ts). Lowered at start
   * to leave 256 of the process's file descriptors for stores and children.
   */
  max_connections: z.number().int().min(1).max(1_000_000).default(1024),
  /**
   * Requests the supervisor carries at once (logged and not yet at their
   * goal). Past it an agent's new invoke is refused with service_busy
   * before anything is recorded; a request already logged and the control
   * token's are always carried (supervisor/api/request-bound.ts). Each waiting request holds ~13 KB of
   * the supervisor's memory, so 4096 keep a flood of calls to ~50 MB and a
   * few seconds of work queued ahead of the next caller.
   */
  max_requests_in_flight: z.number().int().min(1).max(1_000_000).default(4096),
  /**
   * Reads of the agent token that ask the kernel or an executor (GET of
   * operations, tools, keys) answered at once. Past it a read is refused
   * with service_busy (supervisor/api/read-bound.ts). The default, 32, is an
   * eighth of the kernel's channel (kernel_max_in_flight, 256) and half of
   * an executor's (max_in_flight, 64), so reads leave the invokes most of
   * each; an execute an executor's full channel refuses waits and is sent
   * again, never lost.
   */
  max_reads_in_flight: z.number().int().min(1).max(4096).default(32),
  /** Requests the kernel channel carries at once. */
  kernel_max_in_flight: z.number().int().min(1).max(4096).default(256),
  /**
   * Operations in doubt one recovery sweep looks at (supervisor/operations/
   * recovery.ts); the next sweep goes on after the last one it looked at, so
   * every one is reached however many wait. A sweep holds the views it
   * lists (each with its signed artifacts, ~2-4 KB): at most 100,000.
   */
  recovery_sweep_operations: z.number().int().min(1).max(100_000).default(10_000),
});

export const timingSchema = z.strictObject({
  heartbeat_interval_ms: millis(600_000).default(5_000),
  /**
   * A ping not answered within this long means the child hung. At least
   * 100 ms: a pong crosses two event loops and a pipe each way, and below
   * that every ping of a healthy child was missed (the boot failed as
   * channel_closed).
   */
  heartbeat_timeout_ms: z.number().int().min(100).max(600_000).default(10_000),
  hello_timeout_ms: millis(600_000).default(15_000),
  /**
   * How long a child that announced a store migration (an upgrade's first
   * start) may take to say hello, from that announcement (docs/PROTOCOL.md
   * §5). ~66 µs per kernel operation here: 1 h is ~50 million operations.
   */
  migrate_timeout_ms: millis(86_400_000).default(3_600_000),
  /** Deadline of each kernel request. */
  kernel_request_ms: millis(600_000).default(30_000),
  /** Least deadline of one reconciliation exchange with an executor (the tool's deadline + 10 s when larger). */
  reconcile_exchange_ms: millis(600_000).default(15_000),
  /** Grace after a `cancel` before the watchdog kills. */
  cancel_grace_ms: millis(600_000).default(2_000),
  /** Backoff of reconciliation retries and re-polls of unknown operations. */
  retry_backoff_initial_ms: millis(600_000).default(500),
  retry_backoff_max_ms: millis(3_600_000).default(30_000),
  /**
   * How long a kernel's store head may wait in memory for a request write of
   * supervisor.db to carry it before it is written alone (docs/ROLLBACK.md,
   * "Group commit"). The start's head is always written before the execute
   * frame leaves, the settle's before the client is answered. 0: at the end
   * of the turn it arrived in.
   */
  kernel_head_linger_ms: z.number().int().min(0).max(1_000).default(50),
  /** How often committed starts are swept for operations nobody drives. */
  recovery_sweep_ms: millis(3_600_000).default(5_000),
  /**
   * How often settled operations past their window leave each executor's
   * live ledger for its archive (supervisor/operations/archival.ts): the
   * live ledger holds claim_capacity claims, and a full one refuses every
   * execute (ledger_full). 0: only when an operator runs custody archive.
   */
  archive_interval_ms: z.number().int().min(0).max(86_400_000).default(10_000),
  /** How long a graceful shutdown lets in-flight operations finish. */
  shutdown_grace_ms: millis(600_000).default(30_000),
  /**
   * Executor pools: how long a new operation waits for a running executor of
   * its tool when every one is failed or restarting; past it, executor_unavailable.
   * 0 refuses at once.
   */
  executor_wait_ms: z.number().int().min(0).max(600_000).default(10_000),
  /**
   * How long a connection to the API may take to send its request headers,
   * then its whole request (not to be answered: an invoke may wait minutes);
   * past either it is answered 408 and closed, freeing its place under
   * bounds.max_connections (supervisor/api/server.ts checks every second).
   */
  api_headers_timeout_ms: z.number().int().min(1_000).max(600_000).default(10_000),
  api_request_timeout_ms: z.number().int().min(1_000).max(3_600_000).default(30_000),
  /**
   * How long a read that asks a child (GET of operations, tools, keys) waits
   * for its answer. It holds a place under bounds.max_reads_in_flight until
   * answered, so one the kernel never answers must not hold it for good;
   * past it the caller is told 503 service_unavailable and asks again.
   */
  child_read_timeout_ms: millis(600_000).default(30_000),
});

export const metricsSchema = z.strictObject({
  /**
   * GET /metrics asks for the agent (or control) token. Default false: the
   * API listens on 127.0.0.1 only, so a scraper on this host reads it without one.
   */
  require_token: z.boolean().default(false),
});

export const configSchema = z.strictObject({
  /** The control API port on 127.0.0.1; 0 picks a free port (written to supervisor/service.json). */
  port: z.number().int().min(0).max(65_535).default(8421),
  kernel: kernelSchema.default(() => kernelSchema.parse({})),
  executors: z.array(executorSchema).min(1).default(() => [executorSchema.parse({ name: 'default' })]),
  restart: restartPolicySchema.default(() => restartPolicySchema.parse({})),
  bounds: boundsSchema.default(() => boundsSchema.parse({})),
  timing: timingSchema.default(() => timingSchema.parse({})),
  metrics: metricsSchema.default(() => metricsSchema.parse({})),
});

export type CustodyConfig = z.infer<typeof configSchema>;
export type RestartPolicy = z.infer<typeof restartPolicySchema>;
export type Timing = z.infer<typeof timingSchema>;

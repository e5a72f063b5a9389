// `custody init`: provision a state directory. Each child runs once in its
// provision mode, so each generates its own key inside its own process; the
// supervisor records the identity each proves (the pins), gives the kernel
// the executors' public keys, and writes the two API tokens. An existing
// state is never overwritten.
import { randomBytes } from 'node:crypto';
import { closeSync, existsSync, fsyncSync, mkdirSync, openSync, readdirSync, readFileSync, rmSync, writeSync } from 'node:fs';
import path from 'node:path';
import { CustodyError } from '../shared/errors.js';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Logger } from '../shared/log.js';
import { type ChildSession, killGroup, spawnChild } from '../shared/child/spawn.js';
import { ensurePrivateDir, replacePrivateFile, syncDirectory } from '../shared/store/private-fs.js';
import { isGone, processStartTicks } from '../shared/child/proc-stat.js';
import { nowMs } from '../shared/clock.js';
import { defaultConfig, loadConfig } from './config/load.js';
import type { CustodyConfig } from './config/schema.js';
import { executorArgv, executorSettings, kernelArgv } from './children/specs.js';
import { CONFIG_FILE, INIT_ENTRIES, INIT_MARKER, INIT_MARKER_NEXT, needsInit, type StatePaths, statePaths } from './paths.js';
import { SupervisorStore } from './store/supervisor-store.js';
import { stopGracefully } from './watchdog/reap.js';

/** How long a provisioned child has to answer `shutdown`. */
const PROVISION_GRACE_MS = 10_000;

export interface InitOptions {
  readonly executors?: number;
  /** A configuration to write instead of the defaults (tests, custom layouts). */
  readonly config?: CustodyConfig;
  readonly log: Logger;
  /** Where the children's stderr lines go; default: this process's stderr. */
  readonly onChildStderr?: (line: string) => void;
}

export interface InitResult {
  readonly paths: StatePaths;
  readonly kernelPublicKey: string;
  readonly executors: ReadonlyArray<{ name: string; id: string; publicKey: string; keyEpoch: number }>;
}

/** Create a file that must not exist yet, private, with the given content. */
export function writePrivateFile(file: string, content: string): void {
  const fd = openSync(file, 'wx', 0o600);
  try {
    writeSync(fd, content);
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

export async function initState(root: string, options: InitOptions): Promise<InitResult> {
  const paths = statePaths(root);
  if (!needsInit(paths.root)) {
    throw new CustodyError('state_exists', `${paths.root} is not empty; custody init never overwrites a state directory (start it with custody start, or choose another --state)`);
  }
  const log = options.log.child({ phase: 'init' });
  mkdirSync(paths.root, { recursive: true, mode: 0o700 });
  ensurePrivateDir(paths.root, { create: true });
  await clearInterrupted(paths.root, log);
  // An operator's custody.json placed in the empty state decides what init fixes (executors, claim capacity, the
  // default grant); it is read, never rewritten.
  const given = existsSync(paths.config);
  if (given && options.config) throw new CustodyError('state_exists', `${paths.config} is already there; remove it or make the state without a configuration of its own`);
  const config = options.config ?? (given ? loadConfig(paths.config) : defaultConfig(options.executors ?? 1));
  // First in, last out: until it is removed, this state is one the next init makes again. It names this process and
  // each child it starts (before the child has its preamble), so the next init can stop any this one left running.
  const marker = path.join(paths.root, INIT_MARKER);
  const holder = { ...processMark(process.pid), config_given: given, children: [] as ProcessMark[] };
  writePrivateFile(marker, JSON.stringify(holder) + '\n');
  syncDirectory(paths.root);
  const onSpawned = (pid: number) => {
    holder.children.push(processMark(pid));
    replacePrivateFile(marker, JSON.stringify(holder) + '\n', { durable: false });
  };
  const made = await provision(paths, config, { ...options, writeConfig: !given }, log, onSpawned);
  rmSync(marker);
  syncDirectory(paths.root);
  return made;
}

/**
 * What an init killed half-way left (keys, stores, pins of a state that never
 * served an operation): removed, so the init that follows starts clean. Not
 * while that init still runs (its pid and start time in the marker), and
 * never anything init does not make: an unknown file is the operator's.
 */
async function clearInterrupted(root: string, log: Logger): Promise<void> {
  const marker = path.join(root, INIT_MARKER);
  const holder = readMarker(marker);
  if (holder === undefined) return;
  // A kill between writing the marker's next bytes and renaming them over it leaves both: the next names the child
  // started last, which the marker does not yet.
  const next = readMarker(path.join(root, INIT_MARKER_NEXT)) ?? {};
  const initProcess = markOf(holder);
  const pid = initProcess?.pid ?? null;
  if (initProcess && stillRuns(initProcess)) {
    throw new CustodyError('state_exists', `${root} is being made by custody pid ${pid} (${INIT_MARKER} names it); wait for it, or stop it and run this again`);
  }
  const entries = readdirSync(root);
  const foreign = entries.filter((entry) => !INIT_ENTRIES.has(entry));
  if (foreign.length > 0) {
    throw new CustodyError('state_exists', `${root} holds an init that never finished (${INIT_MARKER}) and also ${foreign.join(', ')}, which init does not make; move those aside, then run this again`);
  }
  await stopChildren([...listOf(holder.children), ...listOf(next.children)]);
  // The operator's own custody.json, there before that init, stays for this one to read. Only a marker that says
  // init wrote it lets it go: one left empty or torn (init killed, or the disk full, while writing it) was written
  // before init could have made a custody.json, so the one there is the operator's.
  const made = entries.filter((entry) => entry !== INIT_MARKER && !(entry === CONFIG_FILE && holder.config_given !== false));
  for (const entry of made) rmSync(path.join(root, entry), { recursive: true, force: true });
  rmSync(marker);
  syncDirectory(root);
  log.warn('init_interrupted_cleared', { state: root, removed: made, message: `${root} was left by an init that never finished${pid === null ? '' : ` (pid ${pid})`}: what it made is removed and the state is made again` });
}

/** What a marker file holds: undefined where there is none, empty where it cannot be read (a kill mid-write). */
function readMarker(file: string): MarkerFields | undefined {
  try {
    const value: unknown = JSON.parse(readFileSync(file, 'utf8'));
    return typeof value === 'object' && value !== null ? value : {};
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'ENOENT' ? undefined : {};
  }
}

interface MarkerFields {
  readonly pid?: unknown;
  readonly start_ticks?: unknown;
  readonly config_given?: unknown;
  readonly children?: unknown;
}

function listOf(value: unknown): unknown[] {
  return Array.isArray(value) ? value : [];
}

/**
 * The children a killed init started (the kernel, an executor, in their
 * provision mode) outlive it until they read the end of their stdin, and one
 * that had its preamble goes on provisioning into the state: each still
 * running (its pid and start time as the marker names them) is killed, its
 * process group with it, and waited for, before anything is removed.
 */
async function stopChildren(children: readonly unknown[]): Promise<void> {
  for (const child of children.map(markOf)) {
    // Without its start time a pid proves nothing (it may name another process by now): left alone.
    if (!child || child.start_ticks === null || !stillRuns(child)) continue;
    killGroup(child.pid, 'SIGKILL');
    const started = performance.now();
    while (stillRuns(child) && performance.now() - started < 10_000) await sleep(20);
  }
}

/** A process as the marker names it: its pid and start time (/proc/<pid>/stat field 22), which tell it from a later one with its pid. */
interface ProcessMark {
  readonly pid: number;
  readonly start_ticks: number | null;
}

function processMark(pid: number): ProcessMark {
  return { pid, start_ticks: processStartTicks(pid) ?? null };
}

/** The mark in what the marker file holds, or null. */
function markOf(value: unknown): ProcessMark | null {
  const { pid, start_ticks } = (value ?? {}) as { pid?: unknown; start_ticks?: unknown };
  return typeof pid === 'number' ? { pid, start_ticks: typeof start_ticks === 'number' ? start_ticks : null } : null;
}

function stillRuns(mark: ProcessMark): boolean {
  return !isGone(mark.pid, mark.start_ticks);
}

async function provision(
  paths: StatePaths,
  config: CustodyConfig,
  options: InitOptions & { writeConfig: boolean },
  log: Logger,
  onSpawned: (pid: number) => void,
): Promise<InitResult> {
  if (options.writeConfig) writePrivateFile(paths.config, JSON.stringify(config, null, 2) + '\n');
  ensurePrivateDir(paths.supervisorDir, { create: true });
  ensurePrivateDir(paths.executorsDir, { create: true });
  ensurePrivateDir(paths.resourcesDir, { create: true });
  const store = SupervisorStore.provision(paths.supervisorDir);
  writePrivateFile(paths.agentToken, randomBytes(32).toString('hex') + '\n');
  writePrivateFile(paths.controlToken, randomBytes(32).toString('hex') + '\n');

  const common = {
    limits: { maxFrameBytes: config.bounds.max_frame_bytes, maxDepth: config.bounds.max_depth },
    expect: null,
    maxInFlight: 8,
    helloTimeoutMs: config.timing.hello_timeout_ms,
    log,
    mode: 'provision' as const,
    onSpawned,
    ...(options.onChildStderr ? { onStderrLine: options.onChildStderr } : {}),
  };
  const started: Array<{ name: string; session: ChildSession }> = [];
  try {
    const kernel = await spawnChild({ ...common, argv: kernelArgv(config, paths), role: 'kernel', name: 'kernel', pins: { kernel: null }, settings: config.kernel.settings });
    started.push({ name: 'kernel', session: kernel });
    const kernelPublicKey = kernel.hello.public_key;
    store.putPin({ name: 'kernel', role: 'kernel', identity_id: kernel.hello.id, public_key: kernelPublicKey, key_epoch: kernel.hello.key_epoch, pinned_at: nowMs() });
    log.info('kernel_provisioned', { public_key: kernelPublicKey });

    const executors: Array<{ name: string; id: string; publicKey: string; keyEpoch: number }> = [];
    for (const executor of config.executors) {
      const child = await spawnChild({
        ...common,
        argv: executorArgv(executor, paths),
        role: 'executor',
        name: executor.name,
        pins: { kernel: kernelPublicKey },
        settings: executorSettings(executor),
      });
      started.push({ name: executor.name, session: child });
      const { hello } = child;
      store.putPin({ name: executor.name, role: 'executor', identity_id: hello.id, public_key: hello.public_key, key_epoch: hello.key_epoch, pinned_at: nowMs() });
      await kernel.channel.request('executor.pin', { executor_id: hello.id, public_key: hello.public_key, key_epoch: hello.key_epoch, tools: executor.tools });
      executors.push({ name: executor.name, id: hello.id, publicKey: hello.public_key, keyEpoch: hello.key_epoch });
      log.info('executor_provisioned', { name: executor.name, id: hello.id, public_key: hello.public_key });
    }
    return { paths, kernelPublicKey, executors };
  } finally {
    // Provisioned children have nothing in flight: the grace only bounds a silent one.
    const waits = { graceMs: PROVISION_GRACE_MS, leaveMs: config.timing.heartbeat_timeout_ms };
    await Promise.all(started.map(({ name, session }) => stopGracefully(session, waits, log.child({ child: name }))));
    store.close();
  }
}


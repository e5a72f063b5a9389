// The state directory's layout (ARCHITECTURE.md §9), in one place.
import { existsSync, readdirSync } from 'node:fs';
import path from 'node:path';
import { replacementOf } from '../shared/store/private-fs.js';

export const DEFAULT_STATE_DIR = './custody-state';

export interface StatePaths {
  readonly root: string;
  readonly config: string;
  readonly supervisorDir: string;
  readonly agentToken: string;
  readonly controlToken: string;
  readonly serviceJson: string;
  readonly kernelDir: string;
  readonly kernelPub: string;
  readonly executorsDir: string;
  readonly resourcesDir: string;
  executorDir(name: string): string;
  executorPub(name: string): string;
}

export function statePaths(root: string): StatePaths {
  const abs = path.resolve(root);
  return {
    root: abs,
    config: path.join(abs, CONFIG_FILE),
    supervisorDir: path.join(abs, 'supervisor'),
    agentToken: path.join(abs, 'supervisor', 'agent.token'),
    controlToken: path.join(abs, 'supervisor', 'control.token'),
    serviceJson: path.join(abs, 'supervisor', 'service.json'),
    kernelDir: path.join(abs, 'kernel'),
    kernelPub: path.join(abs, 'kernel', 'kernel.pub'),
    executorsDir: path.join(abs, 'executors'),
    resourcesDir: path.join(abs, 'resources'),
    executorDir: (name) => path.join(abs, 'executors', name),
    executorPub: (name) => path.join(abs, 'executors', name, 'executor.pub'),
  };
}

/** --state, else CUSTODY_STATE, else ./custody-state. */
export function resolveStateDir(flag?: string): string {
  return path.resolve(flag ?? process.env.CUSTODY_STATE ?? DEFAULT_STATE_DIR);
}

/** The configuration's name in the state directory. */
export const CONFIG_FILE = 'custody.json';

/**
 * Written first by `custody init` (its pid and start time) and removed last:
 * a state that still holds it was never made whole (its init was killed), and
 * the next init or start makes it again (supervisor/init.ts).
 */
export const INIT_MARKER = '.init-incomplete';

/**
 * The marker's next bytes, written beside it each time init starts a child and renamed over it: a kill between the
 * two leaves it, naming that child when the marker does not yet.
 */
export const INIT_MARKER_NEXT = replacementOf(INIT_MARKER);

/** Everything init makes at a state's top level: all an interrupted init can have left. */
export const INIT_ENTRIES: ReadonlySet<string> = new Set([CONFIG_FILE, 'supervisor', 'kernel', 'executors', 'resources', INIT_MARKER, INIT_MARKER_NEXT]);

/**
 * A state directory that `custody start` should initialize first: missing,
 * empty, holding only the operator's custody.json (what init fixes, such as
 * `executors[].claim_capacity`, is read from it), or left by an init that
 * never finished.
 */
export function needsInit(root: string): boolean {
  if (!existsSync(root)) return true;
  const entries = readdirSync(root);
  return entries.every((entry) => entry === CONFIG_FILE) || entries.includes(INIT_MARKER);
}

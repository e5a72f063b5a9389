// Reading and writing custody.json. Every refusal names the file, the key
// and the value found, so an operator knows what to change.
import { readFileSync } from 'node:fs';
import { PREAMBLE_MAX_BYTES } from '../../shared/protocol/preamble.js';
import type { z } from 'zod';
import { CustodyError } from '../../shared/errors.js';
import { toolName } from '../../shared/protocol/common.js';
import { ARGUMENT_FRAME_ENVELOPE_BYTES, argumentBytesBound } from '../../shared/protocol/bounds.js';
import { describeIssues } from '../../shared/wire/session.js';
import { preambleBytes } from '../../shared/wire/preamble.js';
import { executorSettingsSchema } from '../../shared/protocol/executor-settings.js';
import { parseKernelSettings } from '../../shared/protocol/kernel-settings.js';
import { executorSettings } from '../children/specs.js';
import { type CustodyConfig, configSchema } from './schema.js';

function valueAt(input: unknown, path: readonly PropertyKey[]): unknown {
  let node = input;
  for (const key of path) {
    if (node === null || typeof node !== 'object') return undefined;
    node = (node as Record<PropertyKey, unknown>)[key];
  }
  return node;
}

function describe(value: unknown): string {
  if (value === undefined) return 'nothing';
  const text = JSON.stringify(value);
  return text.length > 60 ? `${text.slice(0, 57)}...` : text;
}

/** Keys an earlier version wrote (custody init spells out every default) and their names now. */
const RENAMED_KEYS: Readonly<Record<string, string>> = {
  reconcile_backoff_initial_ms: 'retry_backoff_initial_ms',
  reconcile_backoff_max_ms: 'retry_backoff_max_ms',
};

function unknownKeys(key: string, keys: readonly PropertyKey[]): string {
  return keys
    .map((k) => {
      const now = typeof k === 'string' ? RENAMED_KEYS[k] : undefined;
      return now === undefined ? JSON.stringify(k) : `${JSON.stringify(k)} (renamed ${JSON.stringify(now)}: rename it in ${key})`;
    })
    .join(', ');
}

function formatIssues(file: string, input: unknown, error: z.ZodError): string {
  return error.issues
    .slice(0, 5)
    .map((issue) => {
      const key = issue.path.length > 0 ? issue.path.join('.') : '(top level)';
      if (issue.code === 'unrecognized_keys') return `${file}: ${key}: unknown key(s) ${unknownKeys(key, issue.keys)}`;
      return `${file}: ${key}: ${issue.message}, got ${describe(valueAt(input, issue.path))}`;
    })
    .join('\n');
}

/** Checks no schema can express: unique names, sane pairs of values, deadline keys. */
function checkConsistency(file: string, config: CustodyConfig): void {
  const problems: string[] = [];
  const names = new Set<string>();
  config.executors.forEach((executor, index) => {
    if (names.has(executor.name)) problems.push(`executors.${index}.name: ${JSON.stringify(executor.name)} is used twice`);
    // Children are named in pins, status, `custody restart NAME`: the kernel's name is taken.
    if (executor.name === 'kernel') problems.push(`executors.${index}.name: "kernel" is the kernel's name; choose another`);
    names.add(executor.name);
    for (const key of Object.keys(executor.deadlines_ms)) {
      if (key !== '*' && !toolName.safeParse(key).success) problems.push(`executors.${index}.deadlines_ms: key ${JSON.stringify(key)} is not a tool name or "*"`);
    }
  });
  if (config.restart.backoff_initial_ms > config.restart.backoff_max_ms) {
    problems.push(`restart.backoff_initial_ms: ${config.restart.backoff_initial_ms} is above restart.backoff_max_ms ${config.restart.backoff_max_ms}`);
  }
  if (config.timing.retry_backoff_initial_ms > config.timing.retry_backoff_max_ms) {
    problems.push(`timing.retry_backoff_initial_ms: ${config.timing.retry_backoff_initial_ms} is above timing.retry_backoff_max_ms`);
  }
  problems.push(...childProblems(config));
  if (problems.length > 0) throw new CustodyError('config_invalid', problems.map((p) => `${file}: ${p}`).join('\n'));
}

/**
 * Keys of an executor's preamble settings that custody.json sets itself
 * (supervisor/children/specs.ts): one given again in `settings` would
 * silently replace it, so it is refused, naming the key to use instead.
 */
const SET_BY_CONFIG: Readonly<Record<string, string>> = {
  executor_id: 'name',
  key_epoch: 'key_epoch',
  claim_capacity: 'claim_capacity',
  max_in_flight: 'max_in_flight',
  adapter_deadline_ms: 'deadlines_ms["*"]',
  adapter_deadlines: 'deadlines_ms',
};

/**
 * What each child would refuse, found before any child starts: its settings
 * against its own schema (this build's children only; another argv may take
 * other keys), its preamble within its 4 KiB line (docs/PROTOCOL.md §4.1),
 * and every argument bound within the frame bound that carries it. Each
 * problem names the custody.json key to change.
 */
function childProblems(config: CustodyConfig): string[] {
  const problems: string[] = [];
  const limits = { max_frame_bytes: config.bounds.max_frame_bytes, max_depth: config.bounds.max_depth };
  config.executors.forEach((executor, index) => {
    const at = `executors.${index}`;
    for (const key of Object.keys(executor.settings)) {
      if (Object.hasOwn(SET_BY_CONFIG, key)) problems.push(`${at}.settings.${key}: set by ${at}.${SET_BY_CONFIG[key]}; remove it from settings`);
    }
    const settings = executorSettings(executor);
    if (executor.argv === null) {
      const parsed = executorSettingsSchema.safeParse(settings);
      if (!parsed.success) problems.push(`${at}.settings: ${describeIssues(parsed.error)}`);
    }
    const bytes = preambleBytes({ role: 'executor', name: executor.name, pinsKernel: true, limits, settings });
    if (bytes > PREAMBLE_MAX_BYTES) {
      problems.push(`${at}: its settings and deadlines make a preamble of ${bytes} bytes, above the ${PREAMBLE_MAX_BYTES} a child reads; shorten ${at}.settings or ${at}.deadlines_ms`);
    }
  });
  const kernel = config.kernel.settings;
  if (config.kernel.argv === null) {
    try {
      parseKernelSettings(kernel);
    } catch (error) {
      problems.push(`kernel.settings: ${(error as Error).message.replace(/^kernel settings( \(custody\.json kernel\.settings\))?: /, '')}`);
    }
  }
  const bytes = preambleBytes({ role: 'kernel', name: 'kernel', pinsKernel: false, limits, settings: kernel });
  if (bytes > PREAMBLE_MAX_BYTES) problems.push(`kernel.settings: makes a preamble of ${bytes} bytes, above the ${PREAMBLE_MAX_BYTES} a child reads; shorten it`);
  // Arguments travel inside reserve_start and execute frames, beside at most ARGUMENT_FRAME_ENVELOPE_BYTES of envelope.
  const carried = config.bounds.max_frame_bytes - ARGUMENT_FRAME_ENVELOPE_BYTES;
  const perTool = typeof kernel.argument_bytes_per_tool === 'object' && kernel.argument_bytes_per_tool !== null ? Object.keys(kernel.argument_bytes_per_tool) : [];
  for (const tool of [null, ...perTool]) {
    const bound = argumentBytesBound(kernel, tool);
    if (bound > carried) {
      const key = tool === null ? 'kernel.settings.argument_bytes_default' : `kernel.settings.argument_bytes_per_tool[${JSON.stringify(tool)}]`;
      problems.push(`${key}: arguments of ${bound} bytes do not fit a frame of bounds.max_frame_bytes ${config.bounds.max_frame_bytes} (at most ${carried}); lower it or raise bounds.max_frame_bytes`);
    }
  }
  return problems;
}

export function parseConfig(input: unknown, file = 'custody.json'): CustodyConfig {
  const parsed = configSchema.safeParse(input);
  if (!parsed.success) throw new CustodyError('config_invalid', formatIssues(file, input, parsed.error));
  checkConsistency(file, parsed.data);
  return parsed.data;
}

export function loadConfig(file: string): CustodyConfig {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (cause) {
    throw new CustodyError('config_invalid', `${file}: cannot be read: ${(cause as Error).message}`, { cause });
  }
  let input: unknown;
  try {
    // An editor that saves UTF-8 with a byte order mark (RFC 8259 §8.1 lets a parser ignore it).
    input = JSON.parse(text.startsWith('\uFEFF') ? text.slice(1) : text);
  } catch (cause) {
    throw new CustodyError('config_invalid', `${file}: not valid JSON: ${(cause as Error).message}`, { cause });
  }
  return parseConfig(input, file);
}

/** The configuration `custody init` writes: every default spelled out, so an operator sees what can be changed. */
export function defaultConfig(executors = 1): CustodyConfig {
  const names = executors === 1 ? ['default'] : Array.from({ length: executors }, (_, i) => `executor-${i + 1}`);
  return parseConfig({ executors: names.map((name) => ({ name })) });
}

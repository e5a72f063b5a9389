// Reading and writing custody.json. Every refusal names the file, the key
// and the value found, so an operator knows what to change.
import { readFileSync } from 'node:fs';
import type { z } from 'zod';
import { CustodyError } from '../../shared/errors.js';
import { toolName } from '../../shared/protocol/common.js';
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
  if (problems.length > 0) throw new CustodyError('config_invalid', problems.map((p) => `${file}: ${p}`).join('\n'));
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

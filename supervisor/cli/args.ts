// Parsing of the CLI's own value formats: --arg K=V / K=@FILE, names,
// ports and durations. Everything here is checked before anything is sent
// or written (docs/SECURITY.md "The CLI").
import { closeSync, existsSync, openSync, readFileSync, readSync } from 'node:fs';
import { CustodyError } from '../../shared/errors.js';
import { argumentBytesBound } from '../../shared/protocol/bounds.js';
import { checkOperationName } from '../../shared/protocol/names.js';
import { decodeUtf8OrRefuse, invalidUtf8Offset } from '../../shared/text/utf8.js';
import { RESERVED_MEMBER } from '../../shared/wire/decode.js';
import { loadConfig } from '../config/load.js';
import { MAX_ANSWER_TIMEOUT_MS } from '../client/index.js';
import { MAX_WAIT_MS } from '../api/wait.js';
import { statePaths } from '../paths.js';

/** One `--arg`: a value given inline, or a file to read once the bound is known. */
export type ArgSource = { readonly value: string } | { readonly file: string };

/** `--arg note=text` or `--arg note=@review.txt` (the file's UTF-8 content), repeatable. Files are read later, under the bound. */
export function collectArg(value: string, previous: Record<string, ArgSource> = {}): Record<string, ArgSource> {
  const at = value.indexOf('=');
  if (at <= 0) throw new CustodyError('usage', `--arg expects KEY=VALUE or KEY=@FILE, got ${JSON.stringify(value)}`);
  const key = value.slice(0, at);
  const raw = value.slice(at + 1);
  if (Object.hasOwn(previous, key)) throw new CustodyError('usage', `--arg ${key} is given twice`);
  if (key === RESERVED_MEMBER) throw new CustodyError('usage', `--arg ${key}: the service refuses an argument named ${RESERVED_MEMBER} (JavaScript drops it); name it otherwise`);
  if (!raw.startsWith('@') && raw.includes('\ufffd') && notUtf8OnCommandLine(value)) {
    throw new CustodyError(
      'encoding_invalid',
      `--arg ${key}: the value is not UTF-8 as it was given (Node would pass each bad byte on as U+FFFD, and that is what would be signed); give it in UTF-8, or as a file with --arg ${key}=@FILE, which names the first bad byte`,
    );
  }
  return { ...previous, [key]: raw.startsWith('@') ? { file: raw.slice(1) } : { value: raw } };
}

/**
 * Whether `decoded` (an argument as Node decoded it, U+FFFD where a byte was
 * not UTF-8) came from bytes that are not UTF-8: the raw command line in
 * /proc/self/cmdline says. False when it cannot be read (not Linux): the
 * value is then taken as decoded.
 */
function notUtf8OnCommandLine(decoded: string): boolean {
  let raw: Buffer;
  try {
    raw = readFileSync('/proc/self/cmdline');
  } catch {
    return false;
  }
  let start = 0;
  while (start < raw.length) {
    const nul = raw.indexOf(0, start);
    const end = nul === -1 ? raw.length : nul;
    const bytes = raw.subarray(start, end);
    if (bytes.toString('utf8').includes(decoded) && invalidUtf8Offset(bytes) !== -1) return true;
    start = end + 1;
  }
  return false;
}

/**
 * The argument bound the service applies to a tool: the kernel's (32 KiB by
 * default), or what custody.json's kernel.settings say. A state directory
 * without a readable custody.json gets the default.
 */
export function argumentBoundFor(stateDir: string, tool: string): number {
  const file = statePaths(stateDir).config;
  if (!existsSync(file)) return argumentBytesBound({}, tool);
  return argumentBytesBound(loadConfig(file).kernel.settings, tool);
}

const CHUNK = 64 * 1024;

/**
 * Read a file's bytes, at most `bound` of them: reading stops at bound + 1
 * bytes and the file is refused (`file_too_large`) without reading more, so
 * `@/dev/zero` answers at once. The content must be strict UTF-8
 * (`encoding_invalid`, with the byte offset).
 */
export function readBoundedText(file: string, bound: number, what: string): string {
  let fd: number;
  try {
    fd = openSync(file, 'r');
  } catch (cause) {
    throw new CustodyError('usage', `${what}: cannot read the file: ${(cause as Error).message}`, { cause });
  }
  const buffer = Buffer.alloc(bound + 1);
  let size = 0;
  try {
    while (size <= bound) {
      const n = readSync(fd, buffer, size, Math.min(CHUNK, bound + 1 - size), null);
      if (n === 0) break;
      size += n;
    }
  } catch (cause) {
    throw new CustodyError('usage', `${what}: cannot read the file: ${(cause as Error).message}`, { cause });
  } finally {
    closeSync(fd);
  }
  if (size > bound) {
    throw new CustodyError('file_too_large', `${what}: the file is larger than ${bound} bytes, the argument bound of this tool (kernel.settings argument_bytes_default / argument_bytes_per_tool); nothing past the bound was read`);
  }
  return decodeUtf8OrRefuse(buffer.subarray(0, size), what);
}

/** Resolve every `--arg`: files are read under `bound` and must be UTF-8. */
export function resolveArguments(specs: Record<string, ArgSource>, bound: number): Record<string, string> {
  const args: Record<string, string> = {};
  for (const [key, spec] of Object.entries(specs)) {
    args[key] = 'file' in spec ? readBoundedText(spec.file, bound, `--arg ${key}=@${spec.file}`) : spec.value;
  }
  return args;
}

/** A request id or operation name given on the command line (shared/protocol/names.ts); name_invalid (exit 2) otherwise. */
export function parseName(flag: string) {
  return (value: string): string => checkOperationName(value, flag);
}

const UNITS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };

/** `90s`, `30m`, `1h`, `2d`, `1500ms`, or a number of milliseconds. */
export function parseDuration(value: string): number {
  const match = /^(\d+)(ms|s|m|h|d)?$/.exec(value.trim());
  if (!match) throw new CustodyError('usage', `expected a duration such as 90s, 30m, 1h or 2d, got ${JSON.stringify(value)}`);
  const ms = Number(match[1]) * UNITS[match[2] ?? 'ms']!;
  if (!Number.isSafeInteger(ms) || ms < 1) throw new CustodyError('usage', `duration ${value} is out of range`);
  return ms;
}

/** `--answer-timeout`: a duration, at most the client's bound of a day. */
export function parseAnswerTimeout(value: string): number {
  const ms = parseDuration(value);
  if (ms > MAX_ANSWER_TIMEOUT_MS) throw new CustodyError('usage', `--answer-timeout is at most 1d (${MAX_ANSWER_TIMEOUT_MS} ms), got ${JSON.stringify(value)}`);
  return ms;
}

/** `--wait`: 0 (answer with the state so far at once: `0`, `0s`, …) or a duration, at most the service's bound of an hour on one call's wait. */
export function parseWait(value: string): number {
  if (/^0+(ms|s|m|h|d)?$/.test(value.trim())) return 0;
  return parseWaitAtLeast1ms(value);
}

/** `custody mcp --wait`: as --wait, without 0 (every call would answer "not known yet" at once). */
export function parseWaitAtLeast1ms(value: string): number {
  const ms = parseDuration(value);
  if (ms > MAX_WAIT_MS) throw new CustodyError('usage', `--wait is at most 1h (${MAX_WAIT_MS} ms), the longest one call may wait; got ${JSON.stringify(value)}: the service carries an operation on past the wait, so ask again with the same name`);
  return ms;
}

export function parseCount(name: string, min: number) {
  return (value: string): number => {
    const n = Number(value);
    if (!/^[0-9]+$/.test(value) || !Number.isSafeInteger(n) || n < min) throw new CustodyError('usage', `${name} expects a whole number ≥ ${min}, got ${JSON.stringify(value)}`);
    return n;
  };
}

/** A TCP port: a whole number 0 to 65535 (0: any free port). */
export function parsePort(value: string): number {
  const n = Number(value);
  if (!/^[0-9]{1,5}$/.test(value) || n > 65_535) throw new CustodyError('usage', `--port expects a whole number from 0 to 65535 (0: any free port), got ${JSON.stringify(value)}`);
  return n;
}

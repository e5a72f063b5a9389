// Parsing of the CLI's own value formats: --arg K=V / K=@FILE and durations.
import { readFileSync } from 'node:fs';
import { CustodyError } from '../../shared/errors.js';

/** `--arg note=text` or `--arg note=@review.txt` (the file's UTF-8 content), repeatable. */
export function collectArg(value: string, previous: Record<string, string> = {}): Record<string, string> {
  const at = value.indexOf('=');
  if (at <= 0) throw new CustodyError('usage', `--arg expects KEY=VALUE or KEY=@FILE, got ${JSON.stringify(value)}`);
  const key = value.slice(0, at);
  const raw = value.slice(at + 1);
  if (Object.hasOwn(previous, key)) throw new CustodyError('usage', `--arg ${key} is given twice`);
  let content = raw;
  if (raw.startsWith('@')) {
    const file = raw.slice(1);
    try {
      content = readFileSync(file, 'utf8');
    } catch (cause) {
      throw new CustodyError('usage', `--arg ${key}=@${file}: cannot read the file: ${(cause as Error).message}`, { cause });
    }
  }
  return { ...previous, [key]: content };
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

export function parseCount(name: string, min: number) {
  return (value: string): number => {
    const n = Number(value);
    if (!Number.isSafeInteger(n) || n < min) throw new CustodyError('usage', `${name} expects a whole number ≥ ${min}, got ${JSON.stringify(value)}`);
    return n;
  };
}

// The strict decode every frame a process reads goes through
// (decodeJsonObject, shared/wire/decode.ts: a fatal UTF-8 decode, one scan
// for depth and repeated members, JSON.parse), against JSON.parse alone on
// the same bytes: how much the strictness costs on this machine. The frames
// are the shapes that carry most bytes per operation, built from the signed
// artifacts of docs/vectors/protocol.json. Numbers only; nothing asserts.
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { decodeJsonObject } from '../../shared/wire/decode.js';
import { measureRate } from './ed25519.js';

const VECTORS = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..', '..', 'docs', 'vectors', 'protocol.json');

export interface DecodeRate {
  /** What the body carries. */
  readonly frame: string;
  readonly bytes: number;
  readonly strict_us: number;
  readonly json_parse_us: number;
}

export function measureDecode(ms: number): DecodeRate[] {
  const { artifacts } = JSON.parse(readFileSync(VECTORS, 'utf8')) as { artifacts: Record<'authorization' | 'report' | 'receipt', { text: string }> };
  const bodies: Record<string, unknown> = {
    'settle (authorization and report as strings)': { authorization: artifacts.authorization.text, report: artifacts.report.text },
    'settle answer (a receipt as a string)': { receipt: artifacts.receipt.text, head: 1234 },
    'a signed artifact': JSON.parse(artifacts.authorization.text) as unknown,
  };
  return Object.entries(bodies).map(([frame, body]) => {
    const bytes = Buffer.from(JSON.stringify(body));
    const text = bytes.toString('utf8');
    return {
      frame,
      bytes: bytes.length,
      strict_us: 1e6 / measureRate(ms, () => decodeJsonObject(bytes, 32)),
      json_parse_us: 1e6 / measureRate(ms, () => void JSON.parse(text)),
    };
  });
}

// The strict decode every frame a process reads goes through
// (decodeJsonObject, shared/wire/decode.ts: a fatal UTF-8 decode, one scan
// for depth and repeated members, JSON.parse), against JSON.parse alone on
// the same bytes (decoded as UTF-8 first, as any reader must): how much the
// strictness costs on this machine. The frames are the shapes that carry
// most bytes per operation, built from the signed artifacts of
// docs/vectors/protocol.json. Numbers only; nothing asserts.
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { decodeJsonObject } from '../../shared/wire/decode.js';
import { measureRate } from './rate.js';

const VECTORS = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..', '..', 'docs', 'vectors', 'protocol.json');

export interface DecodeRate {
  /** What the body carries. */
  readonly frame: string;
  readonly bytes: number;
  readonly strict_us: number;
  /** JSON.parse of the bytes decoded as UTF-8. */
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
    return {
      frame,
      bytes: bytes.length,
      strict_us: 1e6 / measureRate(ms, () => decodeJsonObject(bytes, 32)),
      // The baseline decodes the same bytes too, as a reader must: the ratio is what the strictness adds.
      json_parse_us: 1e6 / measureRate(ms, () => void JSON.parse(bytes.toString('utf8'))),
    };
  });
}

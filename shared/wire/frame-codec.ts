// The authenticated frame layout (ARCHITECTURE.md §4.2, docs/PROTOCOL.md):
//
//   {"v":1,"sid":"…","seq":N,"from":"…","kind":"…","id":"…","body":{…},"mac":"<64 hex>"}\n
//   └──────────────────────── covered by the MAC ──────────────────────┘
//
// The MAC is HMAC-SHA256 with the sender's directional key over every byte
// before `,"mac":"`. It is the last member and has a fixed width, so the
// reader finds it at a fixed offset from the end of the line and checks it on
// the raw bytes before any JSON parsing.
import { createHmac, timingSafeEqual } from 'node:crypto';
import { CustodyError } from '../errors.js';
import type { Role } from '../protocol/common.js';

export const FRAME_VERSION = 1;

const MAC_OPEN = Buffer.from(',"mac":"', 'latin1');
const MAC_CLOSE = Buffer.from('"}', 'latin1');
const MAC_HEX_CHARS = 64;
/** Bytes of `,"mac":"` + 64 hex + `"}` at the end of every frame line. */
export const MAC_TRAILER_BYTES = MAC_OPEN.length + MAC_HEX_CHARS + MAC_CLOSE.length;

const HEX_DIGIT = /^[0-9a-f]{64}$/;

export interface FrameHeader {
  readonly sid: string;
  readonly seq: number;
  readonly from: Role;
  readonly kind: string;
  readonly id: string;
}

export interface Frame extends FrameHeader {
  readonly body: Record<string, unknown>;
}

export function computeMac(key: Buffer, covered: Uint8Array): Buffer {
  return createHmac('sha256', key).update(covered).digest();
}

/** The bytes a MAC covers for a frame: everything before the trailer. */
export function encodeCovered(frame: Frame): Buffer {
  const head =
    `{"v":${FRAME_VERSION},"sid":${JSON.stringify(frame.sid)},"seq":${frame.seq},` +
    `"from":${JSON.stringify(frame.from)},"kind":${JSON.stringify(frame.kind)},` +
    `"id":${JSON.stringify(frame.id)},"body":${JSON.stringify(frame.body)}`;
  return Buffer.from(head, 'utf8');
}

/** One complete frame line, newline included, MAC'd with the sender's key. */
export function sealFrame(frame: Frame, key: Buffer): Buffer {
  return sealCovered(encodeCovered(frame), key);
}

/** Append the MAC trailer and newline to covered bytes. */
export function sealCovered(covered: Buffer, key: Buffer): Buffer {
  const mac = computeMac(key, covered).toString('hex');
  return Buffer.concat([covered, MAC_OPEN, Buffer.from(mac, 'latin1'), MAC_CLOSE, Buffer.from('\n')]);
}

export interface SplitFrame {
  readonly covered: Buffer;
  readonly mac: Buffer;
}

/** Find the MAC trailer at its fixed offset; anything else is malformed. */
export function splitTrailer(line: Buffer): SplitFrame {
  if (line.length <= MAC_TRAILER_BYTES) {
    throw new CustodyError('frame_malformed', `frame of ${line.length} bytes is too short to hold its MAC trailer`);
  }
  const start = line.length - MAC_TRAILER_BYTES;
  const open = line.subarray(start, start + MAC_OPEN.length);
  const hex = line.subarray(start + MAC_OPEN.length, line.length - MAC_CLOSE.length);
  const close = line.subarray(line.length - MAC_CLOSE.length);
  const hexText = hex.toString('latin1');
  if (!open.equals(MAC_OPEN) || !close.equals(MAC_CLOSE) || !HEX_DIGIT.test(hexText)) {
    throw new CustodyError('frame_malformed', 'frame does not end with its MAC trailer ,"mac":"<64 lowercase hex>"}');
  }
  return { covered: line.subarray(0, start), mac: Buffer.from(hexText, 'hex') };
}

/** Constant-time check of a frame's MAC. */
export function macMatches(key: Buffer, split: SplitFrame): boolean {
  return timingSafeEqual(computeMac(key, split.covered), split.mac);
}

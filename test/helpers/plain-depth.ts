// The plain depth scan the fast ones are held to (measureDepth and scanJson,
// shared/wire/decode.ts): one step per code unit, a backslash inside a
// string skips the next one. Bytes and UTF-16 text give the same answer:
// every character that matters is ASCII, and no multi-byte UTF-8 sequence or
// surrogate contains an ASCII unit.
export function plainDepth(units: ArrayLike<number>, limit: number): number {
  let depth = 0;
  let deepest = 0;
  let inString = false;
  for (let i = 0; i < units.length; i++) {
    const unit = units[i];
    if (inString) {
      if (unit === 0x5c) i++;
      else if (unit === 0x22) inString = false;
    } else if (unit === 0x22) inString = true;
    else if (unit === 0x7b || unit === 0x5b) {
      depth++;
      if (depth > deepest) {
        deepest = depth;
        if (deepest > limit) return deepest;
      }
    } else if (unit === 0x7d || unit === 0x5d) depth--;
  }
  return deepest;
}

/** The UTF-16 code units of `text`, for plainDepth. */
export function codeUnits(text: string): Uint16Array {
  return Uint16Array.from({ length: text.length }, (_, i) => text.charCodeAt(i));
}

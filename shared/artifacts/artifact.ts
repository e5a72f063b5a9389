// Signing and decoding the signed artifacts (ARCHITECTURE.md §5). An artifact is the
// RFC 8785 bytes of {schema, signer, body, signature}; the signature covers
// the canonical bytes of the same object without `signature`. Decoding
// refuses anything that is not exactly such bytes: over its cap, not
// canonical, another kind, an untrusted signer, a bad signature, a body
// outside its closed schema, or timestamps out of order.
import { canonicalize } from '../canonical/jcs.js';
import { sha256Hex } from '../canonical/digest.js';
import {
  type Ed25519Backend,
  type Signer,
  defaultBackend,
  publicKeyFromHex,
  signatureFromHex,
  verifyStrict,
} from '../crypto/ed25519.js';
import { CustodyError, toCustodyError } from '../errors.js';
import {
  ARTIFACT_BODIES,
  ARTIFACT_MAX_BYTES,
  ARTIFACT_MAX_DEPTH,
  ARTIFACT_SCHEMAS,
  ARTIFACT_TIME_ORDER,
  type ArtifactBody,
  type ArtifactKind,
  type Envelope,
  envelope as envelopeSchema,
} from '../protocol/artifacts.js';
import { decodeJsonObject, scanJson } from '../wire/decode.js';
import { describeIssues } from '../wire/session.js';

export interface SignedArtifact<K extends ArtifactKind> {
  readonly kind: K;
  /** The exact signed bytes (JCS text): what is stored, sent and replayed. */
  readonly text: string;
  readonly envelope: Envelope;
  readonly body: ArtifactBody<K>;
  /** SHA-256 of the exact bytes, lowercase hex. */
  readonly digest: string;
}

export function artifactDigest(text: string): string {
  return sha256Hex(Buffer.from(text, 'utf8'));
}

function checkBody<K extends ArtifactKind>(kind: K, body: unknown): ArtifactBody<K> {
  const parsed = ARTIFACT_BODIES[kind].safeParse(body);
  if (!parsed.success) {
    throw new CustodyError('artifact_malformed', `${kind} body: ${describeIssues(parsed.error)}`);
  }
  const record = parsed.data as Record<string, unknown>;
  for (const [earlier, later] of ARTIFACT_TIME_ORDER[kind]) {
    const a = record[earlier];
    const b = record[later];
    if (typeof a === 'number' && typeof b === 'number' && a > b) {
      throw new CustodyError('artifact_malformed', `${kind} ${earlier} (${a}) is after ${later} (${b})`);
    }
  }
  return parsed.data as ArtifactBody<K>;
}

function checkSize(kind: ArtifactKind, bytes: number): void {
  const cap = ARTIFACT_MAX_BYTES[kind];
  if (bytes > cap) throw new CustodyError('artifact_too_large', `${kind} of ${bytes} bytes exceeds its cap of ${cap} bytes`);
}

/**
 * Every verifier refuses an artifact nesting deeper than ARTIFACT_MAX_DEPTH
 * (docs/PROTOCOL.md §7.2), so none is signed: a report whose output nests
 * too deep would be refused by the kernel at every settle, leaving an effect
 * that happened with no report that can say so. The executor replaces such
 * an output like one too large (executor-proc/report.ts). The text's
 * structural characters are ASCII, so the string scans as its UTF-8 bytes do.
 */
function checkDepth(kind: ArtifactKind, text: string): void {
  const { depth } = scanJson(text, ARTIFACT_MAX_DEPTH, false);
  if (depth > ARTIFACT_MAX_DEPTH) {
    throw new CustodyError('artifact_too_deep', `${kind} nests deeper than ${ARTIFACT_MAX_DEPTH} levels`);
  }
}

/*
 * RFC 8785 orders the envelope's members body, schema, signature, signer,
 * and the signature and the signer are hex, which JSON never escapes. So the
 * bytes signed ({body, schema, signer}) and the bytes kept and sent (the same
 * with the signature) are one canonical head plus a fixed tail each: the body
 * is canonicalized once, not twice, when signing, and not at all to find the
 * signed bytes of canonical text when verifying (docs/PERFORMANCE.md
 * "Hot-path CPU"). test/shared/artifacts checks both against canonicalize.
 */
function envelopeHead(schema: string, bodyText: string): string {
  return `{"body":${bodyText},"schema":${canonicalize(schema)}`;
}

function unsignedText(head: string, signer: string): string {
  return `${head},"signer":"${signer}"}`;
}

function signatureTail(signature: string, signer: string): string {
  return `,"signature":"${signature}","signer":"${signer}"}`;
}

export function signArtifact<K extends ArtifactKind>(kind: K, body: ArtifactBody<K>, signer: Signer): SignedArtifact<K> {
  const checked = checkBody(kind, body);
  const schema = ARTIFACT_SCHEMAS[kind];
  const head = envelopeHead(schema, canonicalize(checked));
  const signature = signer.signHex(Buffer.from(unsignedText(head, signer.publicKeyHex), 'utf8'));
  const envelope: Envelope = { schema, signer: signer.publicKeyHex, body: checked, signature };
  const text = head + signatureTail(signature, signer.publicKeyHex);
  checkSize(kind, Buffer.byteLength(text, 'utf8'));
  // Only a report carries a value of any shape (its output); every other body's depth is fixed by its schema, far below the bound.
  if (kind === 'report') checkDepth(kind, text);
  return { kind, text, envelope, body: checked, digest: artifactDigest(text) };
}

/** The bytes the signature of canonical envelope text covers: the text without its signature member. */
function signedBytes(text: string, envelope: Envelope): Buffer {
  const tail = signatureTail(envelope.signature, envelope.signer);
  // Canonical text always ends so (readEnvelope checked it); the canonical form is the answer either way.
  const unsigned = text.endsWith(tail)
    ? unsignedText(text.slice(0, text.length - tail.length), envelope.signer)
    : canonicalize({ schema: envelope.schema, signer: envelope.signer, body: envelope.body });
  return Buffer.from(unsigned, 'utf8');
}

export interface DecodeOptions {
  /** Public keys (64 lowercase hex) whose signatures are accepted for this kind. */
  readonly trustedSigners: Iterable<string>;
  readonly backend?: Ed25519Backend;
}

/** Parse and check the envelope of an artifact without trusting anyone: for tools that report what a file is. */
export function readEnvelope(text: string | Buffer): { kind: ArtifactKind; envelope: Envelope; text: string } {
  const bytes = typeof text === 'string' ? Buffer.from(text, 'utf8') : text;
  const maxCap = Math.max(...Object.values(ARTIFACT_MAX_BYTES));
  if (bytes.length > maxCap) throw new CustodyError('artifact_too_large', `artifact of ${bytes.length} bytes exceeds every cap`);
  let object: Record<string, unknown>;
  try {
    object = decodeJsonObject(bytes, ARTIFACT_MAX_DEPTH, 'artifact');
  } catch (error) {
    const failure = toCustodyError(error);
    const code = failure.code === 'frame_too_deep' ? 'artifact_too_deep' : 'artifact_malformed';
    throw new CustodyError(code, failure.message, { cause: error });
  }
  const parsed = envelopeSchema.safeParse(object);
  if (!parsed.success) throw new CustodyError('artifact_malformed', `artifact envelope: ${describeIssues(parsed.error)}`);
  const kind = (Object.keys(ARTIFACT_SCHEMAS) as ArtifactKind[]).find((k) => ARTIFACT_SCHEMAS[k] === parsed.data.schema);
  if (!kind) throw new CustodyError('artifact_malformed', `unknown artifact schema ${JSON.stringify(parsed.data.schema).slice(0, 80)}`);
  const decoded = bytes.toString('utf8');
  let canonical: string;
  try {
    canonical = canonicalize(object);
  } catch (error) {
    throw new CustodyError('artifact_noncanonical', toCustodyError(error).message, { cause: error });
  }
  if (canonical !== decoded) {
    throw new CustodyError('artifact_noncanonical', `${kind} bytes are not their RFC 8785 canonical form`);
  }
  return { kind, envelope: parsed.data, text: decoded };
}

export function decodeArtifact<K extends ArtifactKind>(kind: K, text: string | Buffer, options: DecodeOptions): SignedArtifact<K> {
  const bytes = typeof text === 'string' ? Buffer.from(text, 'utf8') : text;
  checkSize(kind, bytes.length);
  const read = readEnvelope(bytes);
  if (read.kind !== kind) {
    throw new CustodyError('artifact_malformed', `expected a ${kind}, got a ${read.kind}`);
  }
  const { envelope } = read;
  const trusted = options.trustedSigners instanceof Set ? (options.trustedSigners as ReadonlySet<string>) : new Set(options.trustedSigners);
  if (!trusted.has(envelope.signer)) {
    throw new CustodyError('signer_untrusted', `${kind} is signed by ${envelope.signer.slice(0, 16)}…, which is not a trusted key`);
  }
  const valid = verifyStrict(
    publicKeyFromHex(envelope.signer),
    signedBytes(read.text, envelope),
    signatureFromHex(envelope.signature),
    options.backend ?? defaultBackend(),
  );
  if (!valid) throw new CustodyError('signature_invalid', `${kind} signature does not verify`);
  const body = checkBody(kind, envelope.body);
  return { kind, text: read.text, envelope, body, digest: artifactDigest(read.text) };
}

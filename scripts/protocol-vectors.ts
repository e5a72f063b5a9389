// Produces the protocol vectors of docs/PROTOCOL.md from the code itself:
// fixed keys and a fixed session → derived keys, example frames with their
// MACs, a hello proof, a preamble and one signed artifact of each kind. Also
// renders the message reference from the closed schemas. `npm run vectors`
// rewrites docs/vectors/protocol.json and the generated blocks of
// PROTOCOL.md; test/docs/protocol-doc.test.ts fails when either drifts.
import { readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { z } from 'zod';
import { canonicalDigest, sha256Hex } from '../shared/canonical/digest.js';
import { Signer } from '../shared/crypto/ed25519.js';
import { signArtifact } from '../shared/artifacts/artifact.js';
import { ARTIFACT_BODIES, ARTIFACT_MAX_BYTES, ARTIFACT_SCHEMAS, type ArtifactKind } from '../shared/protocol/artifacts.js';
import { operationIdFor, parametersDigest, requestBindingHash } from '../shared/protocol/binding.js';
import { identifier, toolName, toolPattern } from '../shared/protocol/common.js';
import { MESSAGES, helloBody } from '../shared/protocol/messages.js';
import { ERROR_CODES, classOf, summaryOf } from '../shared/errors.js';
import { PREAMBLE_TAG } from '../shared/protocol/preamble.js';
import { computeMac, encodeCovered, sealFrame } from '../shared/wire/frame-codec.js';
import { helloMessage, signHello } from '../shared/wire/hello.js';
import { encodePreamble } from '../shared/wire/preamble.js';
import { HKDF_INFO, deriveDirectionKey } from '../shared/wire/session-keys.js';

const REPO_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
export const VECTORS_FILE = path.join(REPO_ROOT, 'docs', 'vectors', 'protocol.json');
export const PROTOCOL_FILE = path.join(REPO_ROOT, 'docs', 'PROTOCOL.md');

const reasonCode = z.string().regex(/^[a-z][a-z0-9_]{0,63}$/);

const seedOf = (label: string) => Buffer.from(sha256Hex(`custody vector seed: ${label}`), 'hex');

export function buildVectors() {
  const secrets = { sid: '000102030405060708090a0b0c0d0e0f', key: Buffer.from(sha256Hex('custody vector session key'), 'hex') };
  const toChild = deriveDirectionKey(secrets, 'to-child');
  const toSupervisor = deriveDirectionKey(secrets, 'to-supervisor');
  const kernel = Signer.fromSeed(seedOf('kernel'));
  const executor = Signer.fromSeed(seedOf('executor'));
  const challenge = sha256Hex('custody vector challenge');

  const ping = { sid: secrets.sid, seq: 0, from: 'supervisor' as const, kind: 'ping', id: 'q1', body: {} };
  const pingCovered = encodeCovered(ping);
  const hello = signHello(kernel, secrets.sid, challenge, { role: 'kernel', id: 'kernel', keyEpoch: 1 });
  const helloFrame = { sid: secrets.sid, seq: 0, from: 'kernel' as const, kind: 'hello', id: 'hello', body: hello as unknown as Record<string, unknown> };
  const pong = { sid: secrets.sid, seq: 1, from: 'kernel' as const, kind: 'result', id: 'q1', body: { now: 1_767_225_600_000 } };

  const t0 = 1_767_225_600_000;
  const args = { note: 'Reviewed PR #421: do not merge.\n' };
  const requestId = 'note-1';
  const operationId = operationIdFor(requestId);
  const capability = signArtifact('capability', {
    id: 'cap-0001', tool: 'review-notes/append', subject: '*', max_invocations: 4, max_cost_units: null,
    not_before: t0, expires_at: t0 + 3_600_000, issued_at: t0,
  }, kernel);
  const binding = { request_id: requestId, subject: 'agent', tool: 'review-notes/append', parameters_digest: parametersDigest(args), capability_id: null, cost_units: 0 };
  const invocation = {
    operation_id: operationId, request_id: requestId, request_binding_hash: requestBindingHash(binding),
    capability_id: 'cap-0001', capability_digest: capability.digest, tool: 'review-notes/append', parameters_digest: parametersDigest(args),
  };
  const authorization = signArtifact('authorization', {
    executor: { id: 'default', public_key: executor.publicKeyHex, key_epoch: 1 },
    invocation,
    committed: { nonce_id: 'nonce-0001', budget_hold_id: 'hold-0001' },
    not_before: t0 + 1_000, expires_at: t0 + 121_000, issued_at: t0 + 1_000,
  }, kernel);
  const output = { operation_id: operationId, note: args.note, sha256: sha256Hex(args.note) };
  const report = signArtifact('report', {
    authorization_digest: authorization.digest, operation_id: operationId, executor_id: 'default', key_epoch: 1,
    claim_id: 'claim-0001', claimed_at: t0 + 2_000, finished_at: t0 + 2_050, status: 'completed',
    output, output_digest: canonicalDigest(output), realized_cost_units: null,
  }, executor);
  const receipt = signArtifact('receipt', {
    receipt_id: 'rcpt-0002', decision: 'completion', verdict: 'allow', reason: 'ok', operation_id: operationId,
    request_id: requestId, request_binding_hash: invocation.request_binding_hash, tool: 'review-notes/append',
    parameters_digest: invocation.parameters_digest, capability_id: 'cap-0001', state: 'completed',
    hold: { id: 'hold-0001', disposition: 'consumed', invocations: 1, cost_units_held: 0, cost_units_charged: 0 },
    authorization_digest: authorization.digest, report_digest: report.digest, output_digest: report.body.output_digest,
    issued_at: t0 + 2_100,
  }, kernel);

  const preamble = encodePreamble({
    custody: PREAMBLE_TAG, sid: secrets.sid, key: secrets.key.toString('hex'), role: 'executor', name: 'default', challenge,
    mode: 'serve', pins: { kernel: kernel.publicKeyHex }, limits: { max_frame_bytes: 1_048_576, max_depth: 32 }, settings: {},
  });

  return {
    session: {
      sid: secrets.sid,
      session_key: secrets.key.toString('hex'),
      hkdf_info_to_child: HKDF_INFO['to-child'],
      hkdf_info_to_supervisor: HKDF_INFO['to-supervisor'],
      key_to_child: toChild.toString('hex'),
      key_to_supervisor: toSupervisor.toString('hex'),
    },
    preamble_line: preamble.toString('utf8').trimEnd(),
    ping_covered: pingCovered.toString('utf8'),
    ping_mac: computeMac(toChild, pingCovered).toString('hex'),
    ping_line: sealFrame(ping, toChild).toString('utf8').trimEnd(),
    hello: {
      kernel_seed: seedOf('kernel').toString('hex'),
      kernel_public_key: kernel.publicKeyHex,
      challenge,
      signed_message: helloMessage(secrets.sid, challenge, { role: 'kernel', id: 'kernel', keyEpoch: 1 }).toString('utf8'),
      line: sealFrame(helloFrame, toSupervisor).toString('utf8').trimEnd(),
    },
    pong_line: sealFrame(pong, toSupervisor).toString('utf8').trimEnd(),
    artifacts: {
      executor_seed: seedOf('executor').toString('hex'),
      executor_public_key: executor.publicKeyHex,
      capability: { text: capability.text, digest: capability.digest },
      authorization: { text: authorization.text, digest: authorization.digest },
      report: { text: report.text, digest: report.digest },
      receipt: { text: receipt.text, digest: receipt.digest },
    },
  };
}

export type Vectors = ReturnType<typeof buildVectors>;

// ------------------------------------------------------------- message tables

/** Names for the patterns of shared/protocol/common.ts, so the tables say what a string is. */
const PATTERN_NAMES: ReadonlyArray<readonly [z.ZodType, string]> = [
  [identifier, 'identifier'],
  [toolName, 'tool name'],
  [toolPattern, 'tool pattern'],
  [reasonCode, 'error code'],
];

function patternName(pattern: string): string | undefined {
  for (const [schema, name] of PATTERN_NAMES) {
    const json = z.toJSONSchema(schema) as { pattern?: string };
    if (json.pattern === pattern) return name;
  }
  return undefined;
}

function summarize(node: Record<string, unknown>): string {
  if (Array.isArray(node.anyOf)) return (node.anyOf as Record<string, unknown>[]).map(summarize).join(' \\| ');
  if (node.const !== undefined) return JSON.stringify(node.const);
  if (Array.isArray(node.enum)) return (node.enum as unknown[]).map((v) => JSON.stringify(v)).join(' \\| ');
  switch (node.type) {
    case 'string':
      if (typeof node.pattern === 'string') {
        const hex = /^\^\[0-9a-f\]\{(\d+)\}\$$/.exec(node.pattern);
        if (hex) return `hex${hex[1]}`;
        return patternName(node.pattern) ?? 'string (pattern)';
      }
      return typeof node.maxLength === 'number' ? `string ≤ ${node.maxLength}` : 'string';
    case 'integer':
      return node.minimum === 1 ? 'integer ≥ 1' : node.minimum === 0 ? 'integer ≥ 0' : 'integer';
    case 'boolean':
      return 'boolean';
    case 'null':
      return 'null';
    case 'array':
      return `array of ${node.items ? summarize(node.items as Record<string, unknown>) : 'any'}`;
    case 'object':
      if (node.properties) return `{${Object.keys(node.properties).join(', ')}}`;
      return 'object';
    default:
      return 'JSON value';
  }
}

function fieldRows(schema: z.ZodType): string {
  const json = z.toJSONSchema(schema, { unrepresentable: 'any', io: 'input' }) as Record<string, unknown>;
  const properties = (json.properties ?? {}) as Record<string, Record<string, unknown>>;
  const names = Object.keys(properties);
  if (names.length === 0) return json.additionalProperties === false ? '{}' : 'any object';
  return names.map((name) => `\`${name}\`: ${summarize(properties[name]!)}`).join('<br>');
}

export function renderMessageTable(): string {
  const rows = Object.entries(MESSAGES).map(([kind, spec]) => {
    return `| \`${kind}\` | ${spec.to.join(', ')} | ${fieldRows(spec.request)} | ${fieldRows(spec.result)} |`;
  });
  return ['| kind | served by | request body | result body |', '| --- | --- | --- | --- |', ...rows].join('\n');
}

export function renderArtifactTable(): string {
  const rows = (Object.keys(ARTIFACT_SCHEMAS) as ArtifactKind[]).map(
    (kind) => `| ${kind} | \`${ARTIFACT_SCHEMAS[kind]}\` | ${ARTIFACT_MAX_BYTES[kind]} | ${fieldRows(ARTIFACT_BODIES[kind])} |`,
  );
  return ['| kind | schema | cap (bytes) | body members |', '| --- | --- | --- | --- |', ...rows, '', `hello body: ${fieldRows(helloBody)}`].join('\n');
}

export function renderErrorTable(): string {
  const rows = ERROR_CODES.map((code) => `| \`${code}\` | ${classOf(code)} | ${summaryOf(code)} |`);
  return ['| code | class | meaning |', '| --- | --- | --- |', ...rows].join('\n');
}

// --------------------------------------------------------- generated doc blocks

export function renderGenerated(name: string, vectors: Vectors): string {
  switch (name) {
    case 'messages':
      return renderMessageTable();
    case 'artifacts':
      return renderArtifactTable();
    case 'errors':
      return renderErrorTable();
    default: {
      const value = name.split('.').reduce<unknown>((node, key) => (node as Record<string, unknown>)[key], vectors);
      if (typeof value !== 'string') throw new Error(`no vector named ${name}`);
      return '```\n' + value + '\n```';
    }
  }
}

const BLOCK = /<!-- generated:([a-z_.]+) -->\n[\s\S]*?<!-- \/generated -->/g;

/** The protocol document with every generated block rendered from the code. */
export function renderProtocolDoc(current: string, vectors: Vectors): string {
  return current.replace(BLOCK, (_match, name: string) => `<!-- generated:${name} -->\n${renderGenerated(name, vectors)}\n<!-- /generated -->`);
}

if (process.argv[1] && fileURLToPath(import.meta.url) === path.resolve(process.argv[1])) {
  const vectors = buildVectors();
  writeFileSync(VECTORS_FILE, JSON.stringify(vectors, null, 2) + '\n');
  const doc = readFileSync(PROTOCOL_FILE, 'utf8');
  writeFileSync(PROTOCOL_FILE, renderProtocolDoc(doc, vectors));
  process.stdout.write(`wrote ${path.relative(REPO_ROOT, VECTORS_FILE)} and the generated blocks of ${path.relative(REPO_ROOT, PROTOCOL_FILE)}\n`);
}

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
import { signRotation } from '../shared/artifacts/rotation.js';
import { ARTIFACT_BODIES, ARTIFACT_MAX_BYTES, ARTIFACT_SCHEMAS, type ArtifactKind, holdRecord, invocation, receiptBody } from '../shared/protocol/artifacts.js';
import { claimView } from '../shared/protocol/executor-messages.js';
import { grantView, holdView, listedOperation, operationView } from '../shared/protocol/kernel-messages.js';
import { ARGUMENT_BYTES_DEFAULT, kernelSettingsSchema } from '../shared/protocol/kernel-settings.js';
import { DEFAULTS as EXECUTOR_DEFAULTS, executorSettingsSchema } from '../shared/protocol/executor-settings.js';
import { operationIdFor, parametersDigest, requestBindingHash } from '../shared/protocol/binding.js';
import { MESSAGES, helloBody } from '../shared/protocol/messages.js';
import { ERROR_CODES, classOf, summaryOf } from '../shared/errors.js';
import { PREAMBLE_TAG } from '../shared/protocol/preamble.js';
import { computeMac, encodeCovered, sealFrame } from '../shared/wire/frame-codec.js';
import { helloMessage, signHello } from '../shared/wire/hello.js';
import { encodePreamble } from '../shared/wire/preamble.js';
import { canonicalBytes } from '../shared/canonical/jcs.js';
import { type ChildRole, identifier, toolName, toolPattern } from '../shared/protocol/common.js';
import { HKDF_INFO, deriveDirectionKey } from '../shared/wire/session-keys.js';

const REPO_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
export const VECTORS_FILE = path.join(REPO_ROOT, 'docs', 'vectors', 'protocol.json');
export const PROTOCOL_FILE = path.join(REPO_ROOT, 'docs', 'PROTOCOL.md');

const reasonCode = z.string().regex(/^[a-z][a-z0-9_]{0,63}$/);

const seedOf = (label: string) => Buffer.from(sha256Hex(`custody vector seed: ${label}`), 'hex');

const T0 = 1_767_225_600_000;

/** A session walked end to end with one child: preamble → hello → ping → pong, all under one sid. */
function chainFor(
  role: ChildRole,
  name: string,
  signer: Signer,
  pins: { kernel: string | null },
  secrets: { sid: string; key: Buffer },
  challenge: string,
) {
  const toChild = deriveDirectionKey(secrets, 'to-child');
  const toSupervisor = deriveDirectionKey(secrets, 'to-supervisor');
  const claim = { role, id: name, keyEpoch: 1 };
  const hello = signHello(signer, secrets.sid, challenge, claim);
  const preamble = encodePreamble({
    custody: PREAMBLE_TAG, sid: secrets.sid, key: secrets.key.toString('hex'), role, name, challenge,
    mode: 'serve', pins, limits: { max_frame_bytes: 1_048_576, max_depth: 32 }, settings: {},
  });
  const helloFrame = { sid: secrets.sid, seq: 0, from: role, kind: 'hello', id: 'hello', body: hello as unknown as Record<string, unknown> };
  const ping = { sid: secrets.sid, seq: 0, from: 'supervisor' as const, kind: 'ping', id: 'q1', body: {} };
  const pong = { sid: secrets.sid, seq: 1, from: role, kind: 'result', id: 'q1', body: { now: T0 } };
  return {
    preamble_line: preamble.toString('utf8').trimEnd(),
    hello_signed_message: helloMessage(secrets.sid, challenge, claim).toString('utf8'),
    hello_line: sealFrame(helloFrame, toSupervisor).toString('utf8').trimEnd(),
    ping_line: sealFrame(ping, toChild).toString('utf8').trimEnd(),
    pong_line: sealFrame(pong, toSupervisor).toString('utf8').trimEnd(),
  };
}

/** The exact text a digest is taken over, and the digest. */
const digestOf = (value: unknown) => ({ input: canonicalBytes(value).toString('utf8'), sha256: canonicalDigest(value) });

export function buildVectors() {
  const secrets = { sid: '000102030405060708090a0b0c0d0e0f', key: Buffer.from(sha256Hex('custody vector session key'), 'hex') };
  const toChild = deriveDirectionKey(secrets, 'to-child');
  const toSupervisor = deriveDirectionKey(secrets, 'to-supervisor');
  const kernel = Signer.fromSeed(seedOf('kernel'));
  const executor = Signer.fromSeed(seedOf('executor'));
  const challenge = sha256Hex('custody vector challenge');

  const ping = { sid: secrets.sid, seq: 0, from: 'supervisor' as const, kind: 'ping', id: 'q1', body: {} };
  const pingCovered = encodeCovered(ping);

  const t0 = T0;
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

  // Key rotation (§12): each current key names its epoch-2 successor.
  const executorNext = Signer.fromSeed(seedOf('executor epoch 2'));
  const kernelNext = Signer.fromSeed(seedOf('kernel epoch 2'));
  const rotationVector = (statement: ReturnType<typeof signRotation>, next: Signer, label: string) => {
    const { signature: _signature, ...unsigned } = statement.envelope;
    return { new_seed: seedOf(label).toString('hex'), new_public_key: next.publicKeyHex, signed_input: canonicalBytes(unsigned).toString('utf8'), text: statement.text, digest: statement.digest };
  };
  const rotations = {
    executor: rotationVector(signRotation(executor, { role: 'executor', id: 'default', epoch: 1 }, executorNext.publicKeyHex, t0 + 3_000), executorNext, 'executor epoch 2'),
    kernel: rotationVector(signRotation(kernel, { role: 'kernel', id: 'kernel', epoch: 1 }, kernelNext.publicKeyHex, t0 + 4_000), kernelNext, 'kernel epoch 2'),
  };

  return {
    rotations,
    session: {
      sid: secrets.sid,
      session_key: secrets.key.toString('hex'),
      challenge,
      hkdf_info_to_child: HKDF_INFO['to-child'],
      hkdf_info_to_supervisor: HKDF_INFO['to-supervisor'],
      key_to_child: toChild.toString('hex'),
      key_to_supervisor: toSupervisor.toString('hex'),
    },
    identities: {
      kernel: { seed: seedOf('kernel').toString('hex'), public_key: kernel.publicKeyHex },
      executor: { seed: seedOf('executor').toString('hex'), public_key: executor.publicKeyHex },
    },
    ping_covered: pingCovered.toString('utf8'),
    ping_mac: computeMac(toChild, pingCovered).toString('hex'),
    chains: {
      kernel: chainFor('kernel', 'kernel', kernel, { kernel: null }, secrets, challenge),
      executor: chainFor('executor', 'default', executor, { kernel: kernel.publicKeyHex }, secrets, challenge),
    },
    digests: {
      parameters_digest: digestOf(args),
      operation_id: digestOf({ custody: 'custody.operation.v1', request_id: requestId }),
      request_binding_hash: digestOf({ custody: 'custody.request.v1', ...binding }),
      output_digest: digestOf(output),
    },
    artifacts: {
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
  // A decision's `reason`: `ok` for an allowed decision, else the error code naming why (§9).
  [reasonCode, '"ok" \\| error code'],
  [receiptBody.shape.state, 'operation state'],
];

/**
 * Nested objects that appear in more than one place, rendered by name in the
 * tables and member by member in the "nested objects" table; every other
 * nested object is spelled out where it stands.
 */
const NESTED_NAMES: ReadonlyArray<readonly [z.ZodType, string, string]> = [
  [invocation, 'invocation', 'what an authorization binds: `expected` in start results, execute and reconcile_operation requests, and `invocation` in an authorization'],
  [holdRecord, 'hold', 'a budget hold as a receipt records it: `id` is null for a decision that placed none'],
  [holdView, 'operation hold', 'the hold of an operation, always with an id'],
  [operationView, 'operation', 'an operation as the kernel reports it (mark_unknown, operation.get, recover)'],
  [listedOperation, 'listed operation', 'an operation as ops.list lists it: its names, state and flag; operation.get answers the rest'],
  [grantView, 'grant', 'a capability and its budget use (grant.add, grant.list, grant.revoke)'],
  [claimView, 'claim', "an executor ledger's entry for an operation (claims.get)"],
];

const jsonSchemaOf = (schema: z.ZodType) => z.toJSONSchema(schema, { unrepresentable: 'any', io: 'input' }) as Record<string, unknown>;

function patternName(pattern: string): string | undefined {
  for (const [schema, name] of PATTERN_NAMES) {
    const json = z.toJSONSchema(schema) as { pattern?: string };
    if (json.pattern === pattern) return name;
  }
  return undefined;
}

/** A JSON Schema node without what depends on where it stands: `$schema`, `$defs`, and the targets of `$ref`. */
function placeless(node: unknown): unknown {
  if (Array.isArray(node)) return node.map(placeless);
  if (node === null || typeof node !== 'object') return node;
  if ('$ref' in node) return { $ref: true };
  return Object.fromEntries(Object.entries(node).filter(([key]) => key !== '$schema' && key !== '$defs').map(([key, value]) => [key, placeless(value)]));
}

function nestedName(node: Record<string, unknown>): string | undefined {
  const text = JSON.stringify(placeless(node));
  for (const [schema, name] of NESTED_NAMES) {
    if (JSON.stringify(placeless(jsonSchemaOf(schema))) === text) return name;
  }
  return undefined;
}

const MAX_SAFE = Number.MAX_SAFE_INTEGER;

function integerText(node: Record<string, unknown>): string {
  const min = typeof node.minimum === 'number' ? node.minimum : undefined;
  const max = typeof node.maximum === 'number' && node.maximum < MAX_SAFE ? node.maximum : undefined;
  if (min !== undefined && max !== undefined) return `integer ${min}–${max}`;
  if (min !== undefined) return `integer ≥ ${min}`;
  return 'integer';
}

/** A string's length bounds, in characters (code points): an empty string where the schema asks for one is outside it. */
function stringText(node: Record<string, unknown>): string {
  const min = typeof node.minLength === 'number' && node.minLength > 0 ? node.minLength : undefined;
  const max = typeof node.maxLength === 'number' ? node.maxLength : undefined;
  if (min !== undefined && max !== undefined) return `string of ${min}–${max}`;
  if (min !== undefined) return `string of ≥ ${min}`;
  return max !== undefined ? `string ≤ ${max}` : 'string';
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
        return patternName(node.pattern) ?? `string matching \`${node.pattern}\``;
      }
      return stringText(node);
    case 'integer':
      return integerText(node);
    case 'boolean':
      return 'boolean';
    case 'null':
      return 'null';
    case 'array': {
      const item = node.items ? summarize(node.items as Record<string, unknown>) : 'any';
      const items = item.includes(' \\| ') ? `(${item})` : item;
      return typeof node.maxItems === 'number' ? `array (≤ ${node.maxItems}) of ${items}` : `array of ${items}`;
    }
    case 'object': {
      const name = nestedName(node);
      if (name) return `*${name}*`;
      if (node.properties) {
        const properties = node.properties as Record<string, Record<string, unknown>>;
        return `{${Object.entries(properties).map(([key, value]) => `${key}: ${summarize(value)}`).join(', ')}}`;
      }
      if (node.propertyNames && node.additionalProperties && typeof node.additionalProperties === 'object') {
        const keys = summarize({ type: 'string', ...(node.propertyNames as Record<string, unknown>) });
        return `object: ${keys} → ${summarize(node.additionalProperties as Record<string, unknown>)}`;
      }
      return 'object';
    }
    default:
      return 'JSON value';
  }
}

function fieldRows(schema: z.ZodType): string {
  const json = jsonSchemaOf(schema);
  const properties = (json.properties ?? {}) as Record<string, Record<string, unknown>>;
  const names = Object.keys(properties);
  if (names.length === 0) return json.additionalProperties === false ? '{}' : 'any object';
  // A member outside `required` may be left out (start's executor_id); every other member is always present.
  const required = new Set(Array.isArray(json.required) ? (json.required as string[]) : names);
  return names.map((name) => `\`${name}\`${required.has(name) ? '' : ' (may be absent)'}: ${summarize(properties[name]!)}`).join('<br>');
}

export function renderMessageTable(): string {
  const rows = Object.entries(MESSAGES).map(([kind, spec]) => {
    return `| \`${kind}\` | ${spec.to.join(', ')} | ${fieldRows(spec.request)} | ${fieldRows(spec.result)} |`;
  });
  return ['| kind | served by | request body | result body |', '| --- | --- | --- | --- |', ...rows].join('\n');
}

export function renderNestedTable(): string {
  const rows = NESTED_NAMES.map(([schema, name, what]) => `| *${name}* | ${what} | ${fieldRows(schema)} |`);
  return ['| object | where | members (all present, none other) |', '| --- | --- | --- |', ...rows].join('\n');
}

export function renderArtifactTable(): string {
  const rows = (Object.keys(ARTIFACT_SCHEMAS) as ArtifactKind[]).map(
    (kind) => `| ${kind} | \`${ARTIFACT_SCHEMAS[kind]}\` | ${ARTIFACT_MAX_BYTES[kind]} | ${fieldRows(ARTIFACT_BODIES[kind])} |`,
  );
  return ['| kind | schema | cap (bytes) | body members |', '| --- | --- | --- | --- |', ...rows, '', `hello body: ${fieldRows(helloBody)}`].join('\n');
}

/** `ok` is no error: it is the `reason` of every allowed decision (receipts; reserve, start and settlement results). */
const REASON_OK_ROW = '| `ok` | (none) | not an error: the `reason` of an allowed decision, in receipts and in reserve, start and report-settling results |';

export function renderErrorTable(): string {
  const rows = ERROR_CODES.map((code) => `| \`${code}\` | ${classOf(code)} | ${summaryOf(code)} |`);
  return ['| code | class | meaning |', '| --- | --- | --- |', REASON_OK_ROW, ...rows].join('\n');
}

// ------------------------------------------------------------ settings tables

interface SettingDoc {
  /** The default when the key is absent, when the schema does not carry it itself. */
  readonly fallback?: string;
  readonly meaning: string;
}

const KERNEL_SETTING_DOCS: Record<string, SettingDoc> = {
  nonce_ttl_ms: { meaning: "how long a reservation's execution nonce lives before the expiry sweep expires it" },
  nonce_capacity: { meaning: 'live (unused, unexpired) nonces at once; when full, `reserve` is refused (`nonce_store_full`), nothing is evicted' },
  max_request_bytes: { meaning: 'UTF-8 bytes of the JCS form of a reserve, start or reserve_start request body' },
  argument_bytes_default: { fallback: `min(${ARGUMENT_BYTES_DEFAULT}, \`max_request_bytes\`)`, meaning: "UTF-8 bytes of the JCS form of a tool's arguments, for tools without their own entry; at most `max_request_bytes`" },
  argument_bytes_per_tool: { meaning: 'per-tool argument bounds, each at most `max_request_bytes`' },
  history_per_operation: { meaning: 'receipts retained per operation (`history_full` past it)' },
  sweep_interval_ms: { meaning: 'how often the expiry sweep runs (it also runs before every batch of requests)' },
  execution_window_ms: { fallback: '`nonce_ttl_ms`', meaning: "length of an authorization's execution window; never past the grant's expiry" },
  commit_batch_max: { meaning: 'requests whose writes share one transaction (group commit)' },
  default_grant: { meaning: 'provision mode only: the grant created with the store, or null for none (ignored when serving)' },
};

/** A default as the tables write it: its JSON, as code. */
const code = (value: unknown) => `\`${JSON.stringify(value)}\``;

const EXECUTOR_SETTING_DOCS: Record<string, SettingDoc> = {
  executor_id: { fallback: "the preamble's `name`", meaning: 'provision: the identity to create (its hello `id`); serve: if given, must equal the ledger\'s (`ledger_identity`)' },
  key_epoch: { fallback: code(1), meaning: 'provision: the key epoch to record; serve: if given, must equal the ledger\'s' },
  claim_capacity: { fallback: code(EXECUTOR_DEFAULTS.claimCapacity), meaning: 'provision: claims the ledger holds, fixed for its life; serve: if given, must equal the ledger\'s' },
  refusal_reserve: { fallback: `min(${EXECUTOR_DEFAULTS.refusalReserve}, max(1, ⌊claim_capacity / 8⌋))`, meaning: 'provision: the part of the capacity only refusals may use; must be below `claim_capacity`; serve: if given, must equal the ledger\'s' },
  max_in_flight: { fallback: code(EXECUTOR_DEFAULTS.maxInFlight), meaning: 'requests handled at once; past it a request is answered `too_many_in_flight` (ping, cancel, shutdown and head.witnessed are always taken)' },
  reconcile_per_tool: { fallback: code(EXECUTOR_DEFAULTS.reconcilePerTool), meaning: 'adapter reconciliations per tool within `reconcile_window_ms` (`reconcile_budget_exhausted` past it)' },
  reconcile_per_session: { fallback: code(EXECUTOR_DEFAULTS.reconcilePerSession), meaning: 'adapter reconciliations per session within `reconcile_window_ms`' },
  reconcile_window_ms: { fallback: code(EXECUTOR_DEFAULTS.reconcileWindowMs), meaning: 'the sliding window the two reconciliation bounds count in' },
  adapter_deadline_ms: { fallback: code(EXECUTOR_DEFAULTS.adapterDeadlineMs), meaning: "an adapter's deadline when neither `adapter_deadlines` nor the adapter names one" },
  adapter_deadlines: { fallback: code({}), meaning: "per-tool deadlines, overriding the adapter's own and the default" },
  cancel_wait_ms: { fallback: code(EXECUTOR_DEFAULTS.cancelWaitMs), meaning: 'how long `cancel` waits for a cancelled adapter to stop' },
  drain_timeout_ms: { fallback: 'the longest adapter deadline + 5000', meaning: 'how long a leaving executor lets effects in flight finish' },
  note_max_bytes: { fallback: code(EXECUTOR_DEFAULTS.noteMaxBytes), meaning: 'bytes of a `review-notes/append` note' },
  admitted_arguments_max: { fallback: code(EXECUTOR_DEFAULTS.admittedArgumentsMax), meaning: "how many argument sets `arguments.check` admitted are kept so that the `execute` of the same arguments does not ask the adapter again: each used once, forgotten when the adapter host is replaced, the oldest dropped past the bound (0: every execute asks)" },
  report_head_linger_ms: { fallback: code(EXECUTOR_DEFAULTS.reportHeadLingerMs), meaning: "how long the ledger head after a report (not a refusal) waits for the next claim's `head` frame to carry it before it is sent alone (0: at once; §5, Head frames)" },
};

/** One row per key of a closed settings schema; a key without its documentation line is an error, so neither can drift. */
export function renderSettingsTable(schema: z.ZodType, docs: Record<string, SettingDoc>, role: string): string {
  const json = jsonSchemaOf(schema);
  const properties = (json.properties ?? {}) as Record<string, Record<string, unknown>>;
  const missing = Object.keys(properties).filter((key) => !docs[key]);
  const stale = Object.keys(docs).filter((key) => !properties[key]);
  if (missing.length > 0 || stale.length > 0) throw new Error(`${role} settings docs: undocumented ${missing.join(', ') || '-'}; stale ${stale.join(', ') || '-'}`);
  const rows = Object.entries(properties).map(([key, node]) => {
    const doc = docs[key]!;
    const fallback = node.default !== undefined ? code(node.default) : doc.fallback ?? '(none)';
    return `| \`${key}\` | ${summarize(node)} | ${fallback} | ${doc.meaning} |`;
  });
  return ['| key | type and bounds | default | meaning |', '| --- | --- | --- | --- |', ...rows].join('\n');
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
    case 'nested':
      return renderNestedTable();
    case 'settings.kernel':
      return renderSettingsTable(kernelSettingsSchema, KERNEL_SETTING_DOCS, 'kernel');
    case 'settings.executor':
      return renderSettingsTable(executorSettingsSchema, EXECUTOR_SETTING_DOCS, 'executor');
    default: {
      const value = name.split('.').reduce<unknown>((node, key) => (node as Record<string, unknown>)[key], vectors);
      if (typeof value !== 'string') throw new Error(`no vector named ${name}`);
      return '```\n' + value + '\n```';
    }
  }
}

const BLOCK = /<!-- generated:([a-z0-9_.]+) -->\n[\s\S]*?<!-- \/generated -->/g;

/** Every `generated:` marker of the document must open a block this script renders; none may be skipped silently. */
export function unrenderedMarkers(doc: string): string[] {
  const rendered = new Set([...doc.matchAll(BLOCK)].map((match) => match.index));
  return [...doc.matchAll(/<!-- generated:([^ ]*) -->/g)].filter((match) => !rendered.has(match.index)).map((match) => match[1]!);
}

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

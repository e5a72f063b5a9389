// status, grant add|list|revoke, receipt export|verify.
import { closeSync, constants as fsConstants, existsSync, lstatSync, mkdirSync, openSync, readFileSync, writeSync } from 'node:fs';
import path from 'node:path';
import { CustodyError } from '../../../shared/errors.js';
import { checkOperationName } from '../../../shared/protocol/names.js';
import { decodeArtifact, readEnvelope } from '../../../shared/artifacts/artifact.js';
import { capabilityBody } from '../../../shared/protocol/artifacts.js';
import { readPublicKeyFile } from '../../../shared/crypto/key-files.js';
import type { z } from 'zod';
import { type ServiceClient, pagesOf } from '../client.js';
import { archiveAnswer, artifactsAnswer, grantAnswer, executorRotateAnswer, grantsAnswer, kernelRotateAnswer, keysAnswer, recoverRollbackAnswer, restartAnswer, statusAnswer } from '../../api/answers.js';
import { type Output, formatDuration, formatTime, table } from '../output.js';

export async function statusCommand(client: ServiceClient, out: Output): Promise<number> {
  const { body } = await client.get('/v1/status', statusAnswer);
  const { service, children } = body;
  const now = Date.now();
  out.result(body, () =>
    [
      `custody pid ${service.pid} on 127.0.0.1:${service.port}, state ${service.state_dir}, up ${formatDuration(service.uptime_ms)}, ${body.in_flight} in flight`,
      table(
        ['CHILD', 'ROLE', 'STATE', 'PID', 'RESTARTS', 'UPTIME', 'IN FLIGHT', 'COMPLETED', 'NEXT RETRY'],
        children.map((c) => [c.name, c.role, c.state, c.pid, c.restarts, formatDuration(c.uptime_ms), c.operations?.in_flight ?? null, c.operations?.completed ?? null, c.next_retry_at === null ? null : `${formatTime(c.next_retry_at)} (in ${formatDuration(Math.max(0, c.next_retry_at - now))})`]),
      ),
      ...children.filter((c) => c.failure).map((c) => `${c.name}: ${c.failure} (custody restart ${c.name} starts it now)`),
    ].join('\n'),
  );
  return children.some((c) => c.state === 'failed') ? 4 : 0;
}

/** custody restart CHILD: a failed child at once, a running one gracefully; answers once it serves again. */
export async function restartCommand(client: ServiceClient, out: Output, name: string): Promise<number> {
  const { body } = await out.progress(`restarting ${name}`, client.post(`/v1/children/${encodeURIComponent(name)}/restart`, {}, restartAnswer));
  const { child } = body;
  out.result(body, () => `Restarted ${child.name}: ${child.state}, pid ${String(child.pid)}, ${child.restarts} restarts`);
  return 0;
}

function grantLine(grant: z.output<typeof grantAnswer>): Array<string | number | null> {
  const body = capabilityBody.parse(readEnvelope(grant.capability).envelope.body);
  return [grant.capability_id, body.tool, body.subject, `${grant.invocations_used}+${grant.invocations_held}/${body.max_invocations}`, body.max_cost_units, formatTime(body.expires_at), grant.revoked_at ? formatTime(grant.revoked_at) : null];
}

const GRANT_HEADERS = ['ID', 'TOOL', 'SUBJECT', 'USED+HELD/MAX', 'COST CAP', 'EXPIRES', 'REVOKED'];

export async function grantAddCommand(client: ServiceClient, out: Output, options: { tool: string; max: number; costUnits?: number; ttl: number }): Promise<number> {
  const { body } = await client.post('/v1/grants', { tool: options.tool, max_invocations: options.max, cost_units: options.costUnits ?? null, ttl_ms: options.ttl }, grantAnswer);
  out.result(body, () => `Granted: ${body.capability_id}\n${table(GRANT_HEADERS, [grantLine(body)])}`);
  return 0;
}

/** Every grant, newest first (or, `live`, those neither expired nor revoked), read `page` at a time. */
export async function grantListCommand(client: ServiceClient, out: Output, live = false, page = 10_000): Promise<number> {
  const grants: Array<z.output<typeof grantsAnswer>['grants'][number]> = [];
  for await (const body of pagesOf(client, `/v1/grants?limit=${page}&live=${live}`, grantsAnswer)) grants.push(...body.grants);
  out.result({ grants }, () => (grants.length === 0 ? (live ? 'No live grants.' : 'No grants.') : table(GRANT_HEADERS, grants.map(grantLine))));
  return 0;
}

export async function grantRevokeCommand(client: ServiceClient, out: Output, id: string): Promise<number> {
  const { body } = await client.delete(`/v1/grants/${encodeURIComponent(id)}`, grantAnswer);
  out.result(body, () => `Revoked: ${id}`);
  return 0;
}

/**
 * File names an export may write: the service proposes them, but only these
 * shapes are written — an artifact (`receipt-2-completion.json`) or a
 * signer's key named by role and epoch (`kernel.e1.pub`, `executor-default.e2.pub`).
 */
const EXPORT_FILE = /^[a-z0-9][a-z0-9-]{0,63}(\.e[1-9][0-9]{0,8})?\.(json|pub)$/;

/**
 * The export directory: created if missing, refused if it (the last
 * component the operator named) is a symlink or not a directory, so nothing
 * is written anywhere but inside it.
 */
function exportDirectory(dir: string): string {
  const target = path.resolve(dir);
  let stat = lstatOrNull(target);
  if (stat === null) {
    mkdirSync(target, { recursive: true });
    stat = lstatOrNull(target);
  }
  if (stat?.isSymbolicLink()) throw new CustodyError('usage', `--out ${dir} is a symbolic link; name a real directory (export writes only inside the directory it names)`);
  if (!stat?.isDirectory()) throw new CustodyError('usage', `--out ${dir} is not a directory`);
  return target;
}

function lstatOrNull(file: string) {
  try {
    return lstatSync(file);
  } catch {
    return null;
  }
}

/** Write one file inside `dir`, never through a symlink (O_NOFOLLOW), never outside it. */
function writeInside(dir: string, name: string, text: string): string {
  if (!EXPORT_FILE.test(name)) throw new CustodyError('usage', `refusing to write ${JSON.stringify(name)}: not a file name an export writes`);
  const file = path.join(dir, name);
  if (path.dirname(file) !== dir) throw new CustodyError('usage', `refusing to write ${JSON.stringify(name)} outside ${dir}`);
  let fd: number;
  try {
    fd = openSync(file, fsConstants.O_WRONLY | fsConstants.O_CREAT | fsConstants.O_TRUNC | fsConstants.O_NOFOLLOW, 0o600);
  } catch (cause) {
    const code = (cause as NodeJS.ErrnoException).code;
    if (code === 'ELOOP') throw new CustodyError('usage', `refusing to write ${file}: it is a symbolic link`, { cause });
    throw new CustodyError('usage', `cannot write ${file}: ${(cause as Error).message}`, { cause });
  }
  try {
    writeSync(fd, text);
  } finally {
    closeSync(fd);
  }
  return file;
}

/** Write each retained artifact's exact bytes to its own file, inside the directory named and nowhere else. */
export async function receiptExportCommand(client: ServiceClient, out: Output, name: string, dir: string | undefined): Promise<number> {
  checkOperationName(name, 'NAME');
  const { body } = await client.get(`/v1/operations/${encodeURIComponent(name)}/artifacts`, artifactsAnswer);
  const target = exportDirectory(dir ?? `${name}-artifacts`);
  const written = body.artifacts.map((artifact) => ({ file: writeInside(target, artifact.file, artifact.text), kind: artifact.kind, bytes: Buffer.byteLength(artifact.text) }));
  const keys = signerKeyFiles(body.artifacts.map((artifact) => artifact.text), (await client.get('/v1/keys', keysAnswer)).body);
  const keyFiles = keys.map((key) => ({ file: writeInside(target, key.file, `${key.public_key}\n`), role: key.role, key_epoch: key.key_epoch }));
  out.result({ name, dir: target, files: written, keys: keyFiles }, () =>
    [
      `Exported ${written.length} artifacts of ${name} to ${target}`,
      ...written.map((w) => `  ${path.basename(w.file)}  ${w.kind}, ${w.bytes} bytes`),
      ...keyFiles.map((k) => `  ${path.basename(k.file)}  public key of the ${k.role} at key epoch ${k.key_epoch}`),
    ].join('\n'),
  );
  return 0;
}

type KeysView = z.output<typeof keysAnswer>;

/** A name an export can use for an executor: its configured name when that fits the file-name shape. */
const EXPORT_NAME = /^[a-z0-9][a-z0-9-]{0,40}$/;

/**
 * The public key of every signer of these artifacts, named by role and epoch
 * (`kernel.e1.pub`, `executor-default.e2.pub`); a signer the service does
 * not know is left out (verify then names it as untrusted).
 */
function signerKeyFiles(texts: readonly string[], keys: KeysView): Array<{ file: string; role: string; key_epoch: number; public_key: string }> {
  const files = new Map<string, { file: string; role: string; key_epoch: number; public_key: string }>();
  for (const text of texts) {
    const signer = readEnvelope(text).envelope.signer;
    const kernel = keys.kernel.find((key) => key.public_key === signer);
    if (kernel) {
      files.set(signer, { file: `kernel.e${kernel.key_epoch}.pub`, role: 'kernel', key_epoch: kernel.key_epoch, public_key: signer });
      continue;
    }
    const executor = keys.executors.find((key) => key.public_key === signer);
    if (executor) {
      const name = EXPORT_NAME.test(executor.name) ? executor.name : signer.slice(0, 16);
      files.set(signer, { file: `executor-${name}.e${executor.key_epoch}.pub`, role: `executor ${executor.name}`, key_epoch: executor.key_epoch, public_key: signer });
    }
  }
  return [...files.values()];
}

/** Offline: nothing but the file and the trusted public key. */
/** A key file named on the command line: unreadable is a usage error; malformed stays key_file_invalid / key_invalid. */
function readKeyArgument(flag: string, file: string): string {
  if (!existsSync(file)) throw new CustodyError('usage', `${flag} ${file}: no such file`);
  return readPublicKeyFile(file);
}

/** The epoch a key file names (`kernel.e2.pub`, `executor-default.e1.pub`), or null. */
function epochOfFileName(file: string): number | null {
  const match = /\.e([1-9][0-9]{0,8})\.pub$/.exec(path.basename(file));
  return match ? Number(match[1]) : null;
}

/**
 * Offline, with nothing but the file and trusted public keys: several of
 * each role may be named (one per key epoch, as receipt export writes them);
 * the one whose key signed the artifact is used. A key file named for an
 * epoch must agree with the epoch a report names.
 */
export function receiptVerifyCommand(out: Output, file: string, options: { trustedKernelPubkey: readonly string[]; trustedExecutorPubkey: readonly string[] }): number {
  if (options.trustedKernelPubkey.length === 0) throw new CustodyError('usage', 'name the kernel\'s public key: --trusted-kernel-pubkey FILE (repeat it for several key epochs)');
  const kernelKeys = options.trustedKernelPubkey.map((keyFile) => ({ file: keyFile, key: readKeyArgument('--trusted-kernel-pubkey', keyFile) }));
  let bytes: Buffer;
  try {
    bytes = readFileSync(file);
  } catch (cause) {
    throw new CustodyError('usage', `cannot read ${file}: ${(cause as Error).message}`, { cause });
  }
  // Shells and editors end files with a newline; it is not part of the signed bytes.
  if (bytes.at(-1) === 0x0a) bytes = bytes.subarray(0, bytes.length - 1);
  const { kind, envelope } = readEnvelope(bytes);
  let trusted = kernelKeys;
  if (kind === 'report') {
    if (options.trustedExecutorPubkey.length === 0) throw new CustodyError('usage', `${file} is a report, signed by an executor: add --trusted-executor-pubkey FILE`);
    trusted = options.trustedExecutorPubkey.map((keyFile) => ({ file: keyFile, key: readKeyArgument('--trusted-executor-pubkey', keyFile) }));
  }
  const artifact = decodeArtifact(kind, bytes, { trustedSigners: trusted.map((entry) => entry.key) });
  const used = trusted.find((entry) => entry.key === envelope.signer)!;
  const body = artifact.body as Record<string, unknown>;
  const fileEpoch = epochOfFileName(used.file);
  if (kind === 'report' && fileEpoch !== null && body.key_epoch !== fileEpoch) {
    throw new CustodyError('signature_invalid', `${file} names executor key epoch ${String(body.key_epoch)}, but it is signed by the key in ${used.file}, named for epoch ${fileEpoch}`);
  }
  const summary = { file, kind, schema: artifact.envelope.schema, signer: artifact.envelope.signer, signer_key_file: used.file, digest: artifact.digest, body };
  out.result({ verified: true, ...summary }, () => {
    const what = kind === 'receipt' ? `receipt: ${String(body.decision)} ${String(body.verdict)} (${String(body.reason)}), state ${String(body.state)}` : kind;
    return `Verified ${what}\n  operation ${typeof body.operation_id === 'string' ? body.operation_id : '-'}\n  signed by ${artifact.envelope.signer} (${used.file})\n  sha256 ${artifact.digest}`;
  });
  return 0;
}

/** Move settled operations whose window has passed out of each executor's live ledger. */
export async function archiveCommand(client: ServiceClient, out: Output): Promise<number> {
  const { body } = await out.progress('archiving settled operations', client.post('/v1/archive', {}, archiveAnswer));
  const { executors } = body;
  out.result(body, () =>
    table(
      ['EXECUTOR', 'ARCHIVED', 'LIVE CLAIMS', 'KEPT (WHY)'],
      executors.map((e) => [e.executor, e.archived, e.live, Object.entries(e.kept).map(([why, n]) => `${n} ${why}`).join(', ') || '-']),
    ),
  );
  return 0;
}

/** The way back for a ledger restored on purpose (docs/ROLLBACK.md). */
export async function recoverRollbackCommand(client: ServiceClient, out: Output, name: string): Promise<number> {
  const { body } = await out.progress(`recovering ${name}`, client.post(`/v1/executors/${encodeURIComponent(name)}/recover-rollback`, {}, recoverRollbackAnswer));
  const result = body;
  out.result(body, () =>
    [
      `Recovered ${result.executor}: head ${result.head} (witness ${result.witnessed}); it serves again`,
      `  ${result.recorded.length} operation(s) recorded again with an unknown outcome, never run again: ${result.recorded.join(', ') || 'none'}`,
      `  ${result.already} still held by the restored ledger`,
      '  reconcile each (custody reconcile NAME); what the tool cannot account for stays unknown, listed by custody ops',
    ].join('\n'),
  );
  return 0;
}

/** `custody executor rotate NAME`: the executor makes its next key; the kernel pins it through the old key's statement. */
export async function executorRotateCommand(client: ServiceClient, out: Output, name: string): Promise<number> {
  const { body } = await out.progress(`rotating the key of ${name}`, client.post(`/v1/executors/${encodeURIComponent(name)}/rotate`, {}, executorRotateAnswer));
  out.result(body, () =>
    [
      `Rotated ${body.name}: key epoch ${body.retired_epoch} → ${body.key_epoch}, public key ${body.public_key}`,
      `  the kernel pinned it; authorizations to epoch ${body.retired_epoch} not yet claimed are refused (epoch_retired) and their holds released`,
    ].join('\n'),
  );
  return 0;
}

/** `custody kernel rotate`: the kernel makes its next key; each executor re-pins it through the old key's statement. */
export async function kernelRotateCommand(client: ServiceClient, out: Output): Promise<number> {
  const { body } = await out.progress('rotating the kernel key', client.post('/v1/kernel/rotate', {}, kernelRotateAnswer));
  out.result(body, () =>
    [
      `Rotated the kernel: key epoch ${body.retired_epoch} → ${body.key_epoch}, public key ${body.public_key}`,
      ...body.executors.map((e) => `  ${e.name}: ${e.kernel_epoch === null ? 'not running; re-pins at its next start' : `re-pinned at kernel epoch ${e.kernel_epoch}`}`),
    ].join('\n'),
  );
  return 0;
}

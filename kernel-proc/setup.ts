// Bringing the kernel up in its directory (ARCHITECTURE.md §9: kernel/kernel.key,
// kernel.pub, kernel.db), in one of two modes that never stand in for each
// other:
//   provision — create the directory (0700), the key pair inside this
//     process, kernel.db and the default grant; refuse anything already there;
//   serve — open what provisioning made; refuse a missing store, and a key
//     that is not the one the store and kernel.pub were made for.
// Either way the directory stays locked for the life of the process. Serving
// starts with recovery: a committed start found now is `awaiting_report`.
import path from 'node:path';
import { createKeyPair, loadSigner, readPublicKeyFile, settlePendingKey } from '../shared/crypto/key-files.js';
import type { Signer } from '../shared/crypto/ed25519.js';
import { CustodyError } from '../shared/errors.js';
import { crashPoint } from '../shared/fault.js';
import { nowMs } from '../shared/clock.js';
import type { Logger } from '../shared/log.js';
import type { Preamble } from '../shared/protocol/preamble.js';
import { acquireDirLock } from '../shared/store/dir-lock.js';
import { ensurePrivateDir, isPathPresent } from '../shared/store/private-fs.js';
import { addGrant } from './grants.js';
import { KERNEL_KEY_EPOCH, type Kernel } from './kernel.js';
import { KernelService } from './service.js';
import { parseKernelSettings } from '../shared/protocol/kernel-settings.js';
import { KernelStore } from './store/kernel-store.js';
import { KERNEL_DB_FILE } from './store/schema.js';

export const KERNEL_KEY_FILE = 'kernel.key';
export const KERNEL_PUB_FILE = 'kernel.pub';

export interface KernelSetupOptions {
  readonly dir: string;
  readonly preamble: Preamble;
  readonly log: Logger;
  /** The session's frame bound (shared/child/runtime.ts checked it against this build's). */
  readonly maxFrameBytes: number;
  /** kernel.db's path no longer names the open file. Must stop this process (after the refusals are answered). */
  readonly onStoreReplaced?: (error: CustodyError) => void;
}

export async function setupKernel(options: KernelSetupOptions): Promise<KernelService> {
  const { dir, preamble, log, maxFrameBytes } = options;
  const settings = parseKernelSettings(preamble.settings);
  const base = { settings, log, maxFrameBytes };
  if (preamble.mode === 'provision') ensurePrivateDir(dir, { create: true });
  const lock = await acquireDirLock(dir);
  try {
    const kernel = preamble.mode === 'provision' ? provision(dir, base) : open(dir, base);
    return new KernelService(kernel, lock, options.onStoreReplaced);
  } catch (error) {
    await lock.release();
    throw error;
  }
}

/** What a Kernel holds besides its store and key. */
type KernelBase = Pick<Kernel, 'settings' | 'log' | 'maxFrameBytes'>;

function provision(dir: string, base: KernelBase): Kernel {
  const { settings, log } = base;
  for (const file of [KERNEL_KEY_FILE, KERNEL_PUB_FILE, KERNEL_DB_FILE]) {
    const existing = path.join(dir, file);
    if (isPathPresent(existing)) {
      throw new CustodyError('store_exists', `${existing} already exists; provisioning never replaces a kernel key or store (serve it, or move the directory aside)`);
    }
  }
  // A failure after this point leaves what was made; the next provisioning is refused until an operator moves it aside.
  const signer = createKeyPair(dir, 'kernel');
  const store = KernelStore.provision(dir);
  const kernel: Kernel = { ...base, dir, store, signer };
  try {
    const now = nowMs();
    store.db.transaction(() => {
      store.recordIdentity({ public_key: signer.publicKeyHex, key_epoch: KERNEL_KEY_EPOCH, created_at: now });
      if (settings.default_grant) {
        const grant = addGrant(kernel, { ...settings.default_grant, not_before: null }, now);
        log.info('default_grant_created', { capability_id: grant.capability_id, tool: grant.tool, max_invocations: grant.max_invocations });
      }
    }).immediate();
  } catch (error) {
    store.close();
    throw error;
  }
  crashPoint('kernel', 'after_provision_commit');
  log.info('kernel_provisioned', { dir, public_key: signer.publicKeyHex });
  return kernel;
}

function open(dir: string, base: KernelBase): Kernel {
  const store = KernelStore.open(dir);
  try {
    const signer = checkIdentity(dir, store, base.log);
    const kernel: Kernel = { ...base, dir, store, signer };
    recover(kernel);
    return kernel;
  } catch (error) {
    store.close();
    throw error;
  }
}

function checkIdentity(dir: string, store: KernelStore, log: Logger): Signer {
  if (!store.identity()) {
    throw new CustodyError('store_schema', `kernel store in ${dir} has no identity row: its provisioning never completed; inspect it and move it aside`);
  }
  // The key in force is the last epoch kernel.db records (a rotation, docs/PROTOCOL.md §12). A rotation
  // it committed is finished here before the key is read; one it never committed is discarded.
  const recorded = store.currentKernelEpoch();
  if (settlePendingKey(dir, 'kernel', recorded.public_key)) log.warn('kernel_rotation_finished', { key_epoch: recorded.epoch, public_key: recorded.public_key });
  const signer = loadSigner(path.join(dir, KERNEL_KEY_FILE));
  if (recorded.public_key !== signer.publicKeyHex) {
    // The key file put back from a copy older than a rotation: a key this kernel.db retired.
    const retired = store.kernelEpochs().find((row) => row.public_key === signer.publicKeyHex);
    const hint = retired
      ? `: the key of epoch ${retired.epoch}, which a rotation retired; ${KERNEL_KEY_FILE} was put back from an older copy. Put back the newest ${KERNEL_KEY_FILE} (epoch ${recorded.epoch}), not an older ${KERNEL_DB_FILE} (docs/ROLLBACK.md)`
      : '';
    throw new CustodyError(
      'identity_mismatch',
      `${KERNEL_KEY_FILE} holds key ${signer.publicKeyHex.slice(0, 16)}…, but ${KERNEL_DB_FILE} records ${recorded.public_key.slice(0, 16)}… for key epoch ${recorded.epoch}${hint}`,
    );
  }
  const published = readPublicKeyFile(path.join(dir, KERNEL_PUB_FILE));
  if (published !== signer.publicKeyHex) {
    throw new CustodyError(
      'identity_mismatch',
      `${KERNEL_PUB_FILE} holds key ${published.slice(0, 16)}…, not the kernel's ${signer.publicKeyHex.slice(0, 16)}…; receipts would not verify against it`,
    );
  }
  return signer;
}

/**
 * Startup recovery (ARCHITECTURE.md §6.3): a start committed before this process began
 * has lost whoever was waiting for it. It becomes `awaiting_report`; the
 * original report still settles it. Nothing is re-authorized: a retried start
 * gets the retained authorization, with its original window.
 */
function recover(kernel: Kernel): void {
  const { store } = kernel;
  const moved = store.db.transaction(() => store.operations.markAllAwaitingReport(Math.max(nowMs(), store.clockHighWater()))).immediate();
  if (moved > 0) {
    kernel.log.info('recovered_committed_starts', { count: moved, state: 'awaiting_report' });
    crashPoint('kernel', 'after_recovery_commit');
  }
}

// What every decision needs: the store, the kernel's signing key, its
// settings and a log. Built once by setup, passed to each decision.
import type { Signer } from '../shared/crypto/ed25519.js';
import type { Logger } from '../shared/log.js';
import type { KernelSettings } from '../shared/protocol/kernel-settings.js';
import type { KernelStore } from './store/kernel-store.js';

export interface Kernel {
  readonly store: KernelStore;
  /** The kernel's directory (kernel.key, kernel.pub, kernel.db). */
  readonly dir: string;
  /** The key of the current epoch; a rotation replaces it (rotation.ts). */
  signer: Signer;
  readonly settings: KernelSettings;
  readonly log: Logger;
  /** The session's frame bound: a list answer is cut to what one frame carries. */
  readonly maxFrameBytes: number;
}

/** The identity the kernel proves in its hello, at its current key epoch (kernel_epochs). */
export const KERNEL_ID = 'kernel';
/** The epoch a kernel is provisioned at. */
export const KERNEL_KEY_EPOCH = 1;

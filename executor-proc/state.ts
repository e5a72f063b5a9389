// What an executor owns in executors/<name>/: executor.key (0600),
// executor.pub, executor.statements (key-statements.ts), ledger.db and
// archive.db, behind the directory lock.
// Provision creates all of them in this process (the key never leaves it)
// and refuses if any is there; serve opens them and refuses anything
// missing, loose, changed or not the files that were provisioned.
import fs from 'node:fs';
import path from 'node:path';
import { nowMs } from '../shared/clock.js';
import { createKeyPair, loadSigner, settlePendingKey } from '../shared/crypto/key-files.js';
import { type Signer, publicKeyFromHex } from '../shared/crypto/ed25519.js';
import { CustodyError, toCustodyError } from '../shared/errors.js';
import { crashPoint } from '../shared/fault.js';
import { type DirLock, acquireDirLock } from '../shared/store/dir-lock.js';
import { ensurePrivateDir, isPathPresent } from '../shared/store/private-fs.js';
import { EpochBook } from './ledger/epochs.js';
import { catchUpKeyEpochs, keepStatementsIfPossible } from './key-statements.js';
import { ARCHIVE_FILE, type ExecutorStores, LEDGER_FILE, openStores, provisionStores } from './ledger/stores.js';
import { type ProvisionSettings, capacityFor } from '../shared/protocol/executor-settings.js';

export const KEY_BASENAME = 'executor';

export interface ExecutorState {
  readonly stores: ExecutorStores;
  readonly signer: Signer;
  readonly lock: DirLock;
  /** Set when opening finished a key rotation a crash interrupted (the epoch it finished). */
  readonly rotationFinished?: number;
  /** Set when the ledger named an older key than executor.key and the epochs between were recorded from executor.statements. */
  readonly keysCaughtUp?: readonly number[];
  /** What opening could not do and the log should say (before a logger for the session exists). */
  readonly warnings?: ReadonlyArray<{ readonly event: string; readonly fields: Record<string, unknown> }>;
}

export interface StateRequest {
  readonly mode: 'provision' | 'serve';
  readonly dir: string;
  /** The preamble's name: the default executor id at provision. */
  readonly name: string;
  readonly kernelPin: string | null;
  readonly settings: ProvisionSettings;
}

export async function openExecutorState(request: StateRequest): Promise<ExecutorState> {
  const kernelPublicKey = checkKernelPin(request.kernelPin);
  const { dir } = request;
  if (request.mode === 'serve' && !isPathPresent(path.join(dir, LEDGER_FILE))) {
    throw new CustodyError('ledger_missing', `ledger ${path.join(dir, LEDGER_FILE)} does not exist; provision this executor first — serving never creates a ledger`);
  }
  ensurePrivateDir(dir, { create: request.mode === 'provision' });
  const lock = await acquireDirLock(dir);
  try {
    if (request.mode === 'provision') return { ...provision(request, kernelPublicKey), lock };
    const open = () =>
      openStores(dir, {
        kernelPublicKey,
        executorId: request.settings.executorId,
        claimCapacity: request.settings.claimCapacity,
        refusalReserve: request.settings.refusalReserve,
      });
    let stores = open();
    const close = () => {
      stores.ledger.close();
      stores.archive.close();
    };
    try {
      // A rotation the ledger committed is finished before the key is read; one it never committed is discarded.
      const current = new EpochBook(stores.ledger).current('key_epochs');
      const finished = settlePendingKey(dir, KEY_BASENAME, current.public_key);
      const signer = loadSigner(path.join(dir, `${KEY_BASENAME}.key`));
      let keysCaughtUp: number[] | undefined;
      if (signer.publicKeyHex !== current.public_key) {
        // A ledger restored from before a key rotation: its epochs are caught up from executor.statements, then it is opened anew.
        keysCaughtUp = catchUpKeyEpochs(dir, stores.ledger, stores.config.executorId, signer.publicKeyHex, path.join(dir, LEDGER_FILE));
        close();
        stores = open();
      }
      const warnings: Array<{ event: string; fields: Record<string, unknown> }> = [];
      keepStatementsIfPossible(dir, stores.ledger, (event, fields) => warnings.push({ event, fields }));
      return { stores, signer, lock, warnings, ...(finished ? { rotationFinished: current.epoch } : {}), ...(keysCaughtUp ? { keysCaughtUp } : {}) };
    } catch (error) {
      close();
      throw error;
    }
  } catch (error) {
    await lock.release().catch(() => undefined);
    throw error;
  }
}

function provision(request: StateRequest, kernelPublicKey: string): { stores: ExecutorStores; signer: Signer } {
  const { dir } = request;
  const present = [`${KEY_BASENAME}.key`, `${KEY_BASENAME}.pub`, LEDGER_FILE, ARCHIVE_FILE].filter((file) => isPathPresent(path.join(dir, file)));
  if (present.length > 0) {
    throw new CustodyError(
      'store_exists',
      `executor ${dir} is already provisioned (${present.join(', ')} present); provisioning never replaces a key or a ledger — serve it, or move it aside yourself`,
    );
  }
  const { capacity, reserve } = capacityFor(request.settings);
  const signer = createKeyPair(dir, KEY_BASENAME);
  const stores = provisionStores({
    dir,
    now: nowMs(),
    config: {
      executorId: request.settings.executorId ?? request.name,
      publicKey: signer.publicKeyHex,
      keyEpoch: request.settings.keyEpoch ?? 1,
      kernelPublicKey,
      claimCapacity: capacity,
      refusalReserve: reserve,
    },
  });
  crashPoint('executor', 'after_provision_commit');
  return { stores, signer };
}

function checkKernelPin(pin: string | null): string {
  if (pin === null) throw new CustodyError('config_invalid', 'an executor needs the kernel public key pinned (preamble pins.kernel)');
  try {
    publicKeyFromHex(pin);
  } catch (error) {
    throw new CustodyError('key_invalid', `pinned kernel key: ${toCustodyError(error).message}`, { cause: error });
  }
  return pin;
}

/** The resources directory the built-in adapter writes in, created private if missing. */
export function ensureResources(resources: string): void {
  fs.mkdirSync(resources, { recursive: true, mode: 0o700 });
}

// Sign and verify rates per Ed25519 backend, as production uses them: signing
// through a Signer, verifying through the backend's strict verify(). Numbers
// only; nothing asserts on speed.
import { randomBytes } from 'node:crypto';
import { pathToFileURL } from 'node:url';
import { BACKENDS, type BackendName, generateSeed, Signer } from '../../shared/crypto/ed25519.js';
import { measureRate } from './rate.js';

export interface Ed25519Rate {
  backend: BackendName;
  op: 'sign' | 'verify';
  perSecond: number;
}

const MESSAGE_BYTES = 200;

export function measureEd25519(ms: number): Array<Ed25519Rate> {
  const message = new Uint8Array(randomBytes(MESSAGE_BYTES));
  const rates: Ed25519Rate[] = [];
  for (const backend of BACKENDS) {
    const signer = Signer.fromSeed(generateSeed(), backend);
    const publicKey = signer.publicKey;
    const signature = signer.sign(message);
    rates.push({ backend: backend.name, op: 'sign', perSecond: measureRate(ms, () => signer.sign(message)) });
    rates.push({
      backend: backend.name,
      op: 'verify',
      perSecond: measureRate(ms, () => {
        if (!backend.verify(publicKey, message, signature)) throw new Error(`${backend.name} refused its own signature`);
      }),
    });
  }
  return rates;
}

function printTable(rates: readonly Ed25519Rate[]): void {
  process.stdout.write(`Ed25519, ${MESSAGE_BYTES}-byte message, Node ${process.version}\n`);
  process.stdout.write(`${'backend'.padEnd(8)} ${'op'.padEnd(7)} ${'ops/s'.padStart(9)}\n`);
  for (const { backend, op, perSecond } of rates) {
    process.stdout.write(`${backend.padEnd(8)} ${op.padEnd(7)} ${String(perSecond).padStart(9)}\n`);
  }
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  printTable(measureEd25519(Number(process.argv[2] ?? 1000)));
}

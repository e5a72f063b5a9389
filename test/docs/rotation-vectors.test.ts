// The rotation statements of docs/PROTOCOL.md §12 against the code: the
// vectors verify with node:crypto's Ed25519 over the documented signing
// input, move a pin from epoch 1 to 2 through the code's own verifier, and
// a statement changed in any way (another signer, a skipped epoch, another
// role) leaves the pin where it was.
import { createPublicKey, verify } from 'node:crypto';
import { expect } from 'chai';
import { canonicalize } from '../../shared/canonical/jcs.js';
import { signArtifact } from '../../shared/artifacts/artifact.js';
import { type EpochKey, verifyChain, verifyRotation } from '../../shared/artifacts/rotation.js';
import { Signer } from '../../shared/crypto/ed25519.js';
import type { RotationBody } from '../../shared/protocol/artifacts.js';
import { buildVectors } from '../../scripts/protocol-vectors.js';

const SPKI_PREFIX = Buffer.from('302a300506032b6570032100', 'hex');
const publicKey = (hex: string) => createPublicKey({ key: Buffer.concat([SPKI_PREFIX, Buffer.from(hex, 'hex')]), format: 'der', type: 'spki' });

describe('docs/PROTOCOL.md §12: rotation statements', () => {
  const vectors = buildVectors();
  const cases = [
    ['executor', { role: 'executor', id: 'default', epoch: 1, publicKey: vectors.identities.executor.public_key }],
    ['kernel', { role: 'kernel', id: 'kernel', epoch: 1, publicKey: vectors.identities.kernel.public_key }],
  ] as const satisfies ReadonlyArray<readonly [keyof typeof vectors.rotations, EpochKey]>;

  for (const [role, pinned] of cases) {
    it(`the ${role} vector is signed by the epoch-1 key over the documented input and moves the pin to epoch 2`, () => {
      const vector = vectors.rotations[role];
      const envelope = JSON.parse(vector.text) as { signature: string; signer: string; body: RotationBody };
      const { signature, ...unsigned } = envelope;
      expect(canonicalize(unsigned)).to.equal(vector.signed_input);
      expect(envelope.signer).to.equal(pinned.publicKey);
      expect(verify(null, Buffer.from(vector.signed_input), publicKey(pinned.publicKey), Buffer.from(signature, 'hex'))).to.equal(true);
      expect(Signer.fromSeed(Buffer.from(vector.new_seed, 'hex')).publicKeyHex).to.equal(vector.new_public_key);
      expect(verifyRotation(pinned, vector.text).next).to.deep.equal({ ...pinned, epoch: 2, publicKey: vector.new_public_key });
      // Delivered again from the new pin: skipped, nothing moves.
      expect(verifyChain({ ...pinned, epoch: 2, publicKey: vector.new_public_key }, [vector.text]).applied).to.have.length(0);
    });
  }

  it('refuses a statement signed by the new key, one that skips an epoch, one for another role or id, and one naming the old key again', () => {
    const old = Signer.fromSeed(Buffer.alloc(32, 1));
    const next = Signer.fromSeed(Buffer.alloc(32, 2));
    const pinned: EpochKey = { role: 'executor', id: 'default', epoch: 1, publicKey: old.publicKeyHex };
    const body: RotationBody = { role: 'executor', id: 'default', old_epoch: 1, new_epoch: 2, old_public_key: old.publicKeyHex, new_public_key: next.publicKeyHex, issued_at: 1 };
    const forged: Array<[string, string]> = [
      ['signed by the new key', signArtifact('rotation', body, next).text],
      ['skipping an epoch', signArtifact('rotation', { ...body, new_epoch: 3 }, old).text],
      ['from another epoch', signArtifact('rotation', { ...body, old_epoch: 2, new_epoch: 3 }, old).text],
      ['for the kernel', signArtifact('rotation', { ...body, role: 'kernel' }, old).text],
      ['for another id', signArtifact('rotation', { ...body, id: 'other' }, old).text],
      ['to the same key', signArtifact('rotation', { ...body, new_public_key: old.publicKeyHex }, old).text],
    ];
    for (const [what, text] of forged) {
      expect(() => verifyRotation(pinned, text), what).to.throw().with.property('code', 'rotation_invalid');
    }
    expect(verifyRotation(pinned, signArtifact('rotation', body, old).text).next.epoch).to.equal(2);
  });
});

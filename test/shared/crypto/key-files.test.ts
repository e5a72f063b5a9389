// Key files: a pair is created in-process with tight modes and never
// overwritten; a secret key file is refused unless it is a private regular
// file of this uid holding exactly 64 lowercase hex characters and a newline.
import {
  chmodSync,
  chownSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  readdirSync,
  renameSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { expect } from 'chai';
import { type ErrorCode, isCustodyError } from '../../../shared/errors.js';
import { BACKENDS, generateSeed, Signer } from '../../../shared/crypto/ed25519.js';
import {
  createKeyPair,
  createPendingKeyPair,
  loadSigner,
  readPublicKeyFile,
  settlePendingKey,
  writePublicKeyFile,
} from '../../../shared/crypto/key-files.js';

function expectCustodyError(action: () => unknown, code: ErrorCode, ...messageParts: string[]): void {
  let thrown: unknown;
  try {
    action();
  } catch (error) {
    thrown = error;
  }
  expect(isCustodyError(thrown, code), `expected CustodyError ${code}, got ${String(thrown)}`).to.equal(true);
  for (const part of messageParts) expect((thrown as Error).message).to.include(part);
}

function modeOf(file: string): number {
  return lstatSync(file).mode & 0o777;
}

const SEED_HEX = '4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb'; // RFC 8032 test 2
const PUBLIC_HEX = '3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c';

describe('key files', function () {
  let dir: string;

  beforeEach(function () {
    dir = mkdtempSync(path.join(os.tmpdir(), 'custody-keys-'));
  });

  afterEach(function () {
    rmSync(dir, { recursive: true, force: true });
  });

  /** A key file as an operator might have left it: given content, chmod 0600. */
  function plantKeyFile(content: string, name = 'planted.key'): string {
    const file = path.join(dir, name);
    writeFileSync(file, content, { mode: 0o600 });
    chmodSync(file, 0o600);
    return file;
  }

  describe('createKeyPair', function () {
    it('writes a 0600 secret key and a 0644 public key that load back into the same signer', function () {
      const signer = createKeyPair(dir, 'kernel');
      const keyPath = path.join(dir, 'kernel.key');
      const publicPath = path.join(dir, 'kernel.pub');
      expect(modeOf(keyPath)).to.equal(0o600);
      expect(modeOf(publicPath)).to.equal(0o644);
      expect(readFileSync(keyPath, 'utf8')).to.match(/^[0-9a-f]{64}\n$/);
      expect(readFileSync(publicPath, 'utf8')).to.equal(`${signer.publicKeyHex}\n`);

      const loaded = loadSigner(keyPath);
      expect(loaded.publicKeyHex).to.equal(signer.publicKeyHex);
      expect(readPublicKeyFile(publicPath)).to.equal(signer.publicKeyHex);
      const message = new TextEncoder().encode('round trip');
      expect(loaded.sign(message)).to.deep.equal(signer.sign(message));
      for (const backend of BACKENDS) expect(backend.verify(signer.publicKey, message, loaded.sign(message))).to.equal(true);
    });

    it('gives exact modes whatever the umask', function () {
      const previous = process.umask(0o077);
      try {
        createKeyPair(dir, 'tight');
      } finally {
        process.umask(previous);
      }
      expect(modeOf(path.join(dir, 'tight.key'))).to.equal(0o600);
      expect(modeOf(path.join(dir, 'tight.pub'))).to.equal(0o644);
    });

    it('refuses when the secret key file already exists, leaving it untouched', function () {
      const existing = plantKeyFile(`${SEED_HEX}\n`, 'taken.key');
      expectCustodyError(() => createKeyPair(dir, 'taken'), 'key_file_invalid', existing, 'already exists');
      expect(readFileSync(existing, 'utf8')).to.equal(`${SEED_HEX}\n`);
      expect(() => lstatSync(path.join(dir, 'taken.pub'))).to.throw();
    });

    it('refuses when the public key file already exists, and leaves no secret key behind', function () {
      writeFileSync(path.join(dir, 'half.pub'), `${PUBLIC_HEX}\n`);
      expectCustodyError(() => createKeyPair(dir, 'half'), 'key_file_invalid', 'half.pub', 'already exists');
      expect(() => lstatSync(path.join(dir, 'half.key'))).to.throw();
      expect(readFileSync(path.join(dir, 'half.pub'), 'utf8')).to.equal(`${PUBLIC_HEX}\n`);
    });

    it('refuses to create through a dangling symlink', function () {
      symlinkSync(path.join(dir, 'elsewhere.key'), path.join(dir, 'linked.key'));
      expectCustodyError(() => createKeyPair(dir, 'linked'), 'key_file_invalid', 'linked.key');
      expect(() => lstatSync(path.join(dir, 'elsewhere.key'))).to.throw();
    });

    ['', '../escape', 'a/b', '.hidden'].forEach((basename) => {
      it(`refuses the basename ${JSON.stringify(basename)}`, function () {
        expectCustodyError(() => createKeyPair(dir, basename), 'key_file_invalid', 'plain file name');
      });
    });
  });

  describe('loadSigner', function () {
    it('loads a private key file into the signer of its seed', function () {
      const signer = loadSigner(plantKeyFile(`${SEED_HEX}\n`));
      expect(signer.publicKeyHex).to.equal(PUBLIC_HEX);
      expect(signer.publicKeyHex).to.equal(Signer.fromSeed(Buffer.from(SEED_HEX, 'hex')).publicKeyHex);
    });

    [0o640, 0o604, 0o660, 0o644, 0o610, 0o601, 0o620, 0o602].forEach((mode) => {
      const octal = mode.toString(8).padStart(4, '0');
      it(`refuses a key file with mode ${octal}`, function () {
        const file = plantKeyFile(`${SEED_HEX}\n`);
        chmodSync(file, mode);
        expectCustodyError(() => loadSigner(file), 'key_file_invalid', file, `mode ${octal}`, 'chmod 0600');
      });
    });

    it('accepts an owner-only mode tighter than 0600 (0400)', function () {
      const file = plantKeyFile(`${SEED_HEX}\n`);
      chmodSync(file, 0o400);
      expect(loadSigner(file).publicKeyHex).to.equal(PUBLIC_HEX);
    });

    it('refuses a symlink to a good key file', function () {
      const target = plantKeyFile(`${SEED_HEX}\n`);
      const link = path.join(dir, 'link.key');
      symlinkSync(target, link);
      expectCustodyError(() => loadSigner(link), 'key_file_invalid', link, 'symbolic link');
    });

    it('refuses a directory', function () {
      const directory = path.join(dir, 'directory.key');
      mkdirSync(directory, { mode: 0o700 });
      expectCustodyError(() => loadSigner(directory), 'key_file_invalid', directory, 'not a regular file');
    });

    it('refuses a missing file, naming it', function () {
      const missing = path.join(dir, 'missing.key');
      expectCustodyError(() => loadSigner(missing), 'key_file_invalid', missing, 'does not exist');
    });

    it('refuses a key file owned by another uid', function () {
      if (process.getuid?.() !== 0) this.skip(); // only root can give a file away
      const file = plantKeyFile(`${SEED_HEX}\n`);
      chownSync(file, 12345, 12345);
      expectCustodyError(() => loadSigner(file), 'key_file_invalid', file, 'owned by uid 12345');
    });

    const badContents: Array<{ name: string; content: string }> = [
      { name: 'an empty file', content: '' },
      { name: 'no trailing newline', content: SEED_HEX },
      { name: 'a CRLF line end', content: `${SEED_HEX}\r\n` },
      { name: 'two newlines', content: `${SEED_HEX}\n\n` },
      { name: 'uppercase hex', content: `${SEED_HEX.toUpperCase()}\n` },
      { name: '63 hex characters', content: `${SEED_HEX.slice(1)}\n` },
      { name: 'a leading space', content: ` ${SEED_HEX.slice(1)}\n` },
      { name: 'a non-hex character', content: `${SEED_HEX.slice(1)}z\n` },
      { name: 'a 64-byte expanded secret key', content: `${SEED_HEX}${PUBLIC_HEX}\n` },
    ];
    badContents.forEach(({ name, content }) => {
      it(`refuses a key file with ${name}`, function () {
        const file = plantKeyFile(content);
        expectCustodyError(() => loadSigner(file), 'key_file_invalid', file, '64 lowercase hex characters and a newline');
      });
    });
  });

  describe('public key files', function () {
    it('round-trips a public key through writePublicKeyFile and readPublicKeyFile', function () {
      const file = path.join(dir, 'peer.pub');
      const hex = Signer.fromSeed(generateSeed()).publicKeyHex;
      writePublicKeyFile(file, hex);
      expect(modeOf(file)).to.equal(0o644);
      expect(readFileSync(file, 'utf8')).to.equal(`${hex}\n`);
      expect(readPublicKeyFile(file)).to.equal(hex);
    });

    it('refuses to overwrite an existing public key file', function () {
      const file = path.join(dir, 'peer.pub');
      writePublicKeyFile(file, PUBLIC_HEX);
      expectCustodyError(() => writePublicKeyFile(file, PUBLIC_HEX), 'key_file_invalid', file, 'already exists');
    });

    it('refuses to write an invalid key', function () {
      const file = path.join(dir, 'small.pub');
      expectCustodyError(() => writePublicKeyFile(file, '01'.padEnd(64, '0')), 'key_invalid', 'small order');
      expect(() => lstatSync(file)).to.throw();
    });

    it('refuses a malformed public key file with key_file_invalid', function () {
      const file = path.join(dir, 'bad.pub');
      writeFileSync(file, PUBLIC_HEX.toUpperCase());
      expectCustodyError(() => readPublicKeyFile(file), 'key_file_invalid', file);
    });

    it('refuses a well-formed file naming a small-order key with key_invalid, naming the file', function () {
      const file = path.join(dir, 'small.pub');
      writeFileSync(file, `${'01'.padEnd(64, '0')}\n`);
      expectCustodyError(() => readPublicKeyFile(file), 'key_invalid', file, 'small order');
    });

    it('refuses a missing public key file with key_file_invalid', function () {
      const file = path.join(dir, 'absent.pub');
      expectCustodyError(() => readPublicKeyFile(file), 'key_file_invalid', file, 'does not exist');
    });
  });

  describe('a rotation cut short (settlePendingKey at the next open)', function () {
    /** The current pair and a pending one, as a rotation leaves them before its promotion. */
    function rotationUnderWay(): { current: string; next: string } {
      const current = createKeyPair(dir, 'kernel').publicKeyHex;
      const next = createPendingKeyPair(dir, 'kernel').publicKeyHex;
      return { current, next };
    }

    it('promotes a pending pair the store names', function () {
      const { next } = rotationUnderWay();
      expect(settlePendingKey(dir, 'kernel', next)).to.equal(true);
      expect(loadSigner(path.join(dir, 'kernel.key')).publicKeyHex).to.equal(next);
      expect(readPublicKeyFile(path.join(dir, 'kernel.pub'))).to.equal(next);
      expect(readdirSync(dir).sort()).to.deep.equal(['kernel.key', 'kernel.pub']);
    });

    it('finishes a promotion killed between its two renames: the private key moved, the public one still pending', function () {
      const { next } = rotationUnderWay();
      renameSync(path.join(dir, 'kernel.next.key'), path.join(dir, 'kernel.key')); // the first rename, then the kill
      expect(readPublicKeyFile(path.join(dir, 'kernel.pub')), 'the public file still names the old key').to.not.equal(next);
      expect(settlePendingKey(dir, 'kernel', next)).to.equal(true);
      expect(readPublicKeyFile(path.join(dir, 'kernel.pub'))).to.equal(next);
      expect(loadSigner(path.join(dir, 'kernel.key')).publicKeyHex).to.equal(next);
      expect(readdirSync(dir).sort()).to.deep.equal(['kernel.key', 'kernel.pub']);
    });

    it('discards a pending pair the store does not name, and a lone pending public file that does not match the store and the key', function () {
      const { current } = rotationUnderWay();
      expect(settlePendingKey(dir, 'kernel', current)).to.equal(false);
      expect(readdirSync(dir).sort()).to.deep.equal(['kernel.key', 'kernel.pub']);
      createPendingKeyPair(dir, 'kernel');
      rmSync(path.join(dir, 'kernel.next.key'));
      expect(settlePendingKey(dir, 'kernel', current)).to.equal(false);
      expect(readPublicKeyFile(path.join(dir, 'kernel.pub'))).to.equal(current);
      expect(readdirSync(dir).sort()).to.deep.equal(['kernel.key', 'kernel.pub']);
    });
  });
});

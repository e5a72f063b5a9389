import fs from 'node:fs';
import path from 'node:path';
import { expect } from 'chai';
import { isCustodyError } from '../../../shared/errors.js';
import { checkPrivateFile, ensurePrivateDir, replacePrivateFile } from '../../../shared/store/private-fs.js';
import { openStore, provisionStore, storeFileIdentity } from '../../../shared/store/sqlite-store.js';
import { makeTempRoot, modeOf, removeTempRoot, specIn } from './helpers.js';

const OTHER_UID = 12345;
const isRoot = process.getuid?.() === 0;

interface Case {
  readonly name: string;
  readonly root?: true;
  /** Breaks the provisioned store in `dir`; returns the directory to open and the path the message must name. */
  readonly spoil: (dir: string, file: string) => { openDir: string; named: string };
}

const CASES: readonly Case[] = [
  { name: 'a directory with mode 0755', spoil: (dir) => (fs.chmodSync(dir, 0o755), { openDir: dir, named: dir }) },
  { name: 'a directory with mode 0750', spoil: (dir) => (fs.chmodSync(dir, 0o750), { openDir: dir, named: dir }) },
  { name: 'a file with mode 0640', spoil: (dir, file) => (fs.chmodSync(file, 0o640), { openDir: dir, named: file }) },
  { name: 'a file with mode 0604', spoil: (dir, file) => (fs.chmodSync(file, 0o604), { openDir: dir, named: file }) },
  {
    name: 'a loose -wal file beside the database',
    spoil: (dir, file) => (fs.writeFileSync(`${file}-wal`, '', { mode: 0o644 }), { openDir: dir, named: `${file}-wal` }),
  },
  {
    name: 'a database file that is a symlink',
    spoil: (dir, file) => {
      const real = path.join(dir, 'real.db');
      fs.renameSync(file, real);
      fs.symlinkSync(real, file);
      return { openDir: dir, named: file };
    },
  },
  {
    name: 'a store directory that is a symlink',
    spoil: (dir) => {
      const link = `${dir}-link`;
      fs.symlinkSync(dir, link);
      return { openDir: link, named: link };
    },
  },
  {
    name: 'a database file owned by another uid',
    root: true,
    spoil: (dir, file) => (fs.chownSync(file, OTHER_UID, OTHER_UID), { openDir: dir, named: file }),
  },
  {
    name: 'a store directory owned by another uid',
    root: true,
    spoil: (dir) => (fs.chownSync(dir, OTHER_UID, OTHER_UID), { openDir: dir, named: dir }),
  },
];

describe('private store files', () => {
  let root: string;
  let dir: string;

  beforeEach(() => {
    root = makeTempRoot();
    dir = path.join(root, 'kernel');
  });

  afterEach(() => removeTempRoot(root));

  describe('opening refuses with store_permissions', () => {
    for (const testCase of CASES) {
      it(`${testCase.name}, naming the path`, function () {
        if (testCase.root === true && !isRoot) this.skip();
        provisionStore(specIn(dir)).close();
        const { openDir, named } = testCase.spoil(dir, path.join(dir, 'test.db'));
        let refusal: unknown;
        try {
          openStore(specIn(openDir)).close();
        } catch (error) {
          refusal = error;
        }
        expect(isCustodyError(refusal, 'store_permissions'), String(refusal)).to.equal(true);
        expect((refusal as Error).message).to.include(named);
      });
    }
  });

  it('names the found mode and the command that fixes it', () => {
    fs.mkdirSync(dir, { mode: 0o750 });
    fs.chmodSync(dir, 0o750);
    expect(() => ensurePrivateDir(dir, { create: false })).to.throw(`${dir} has mode 0750, must be 0700`).with.property('code', 'store_permissions');
    const file = path.join(root, 'loose');
    fs.writeFileSync(file, '', { mode: 0o644 });
    expect(() => checkPrivateFile(file)).to.throw(`chmod 600 ${file}`);
  });

  it('names the owner it found when the owner is another uid', function () {
    if (!isRoot) this.skip();
    fs.mkdirSync(dir, { mode: 0o700 });
    fs.chownSync(dir, OTHER_UID, OTHER_UID);
    expect(() => ensurePrivateDir(dir, { create: false })).to.throw(`owned by uid ${OTHER_UID}`);
  });

  it('creates missing parents and a 0700 directory when asked to', () => {
    const nested = path.join(root, 'a', 'b', 'c');
    ensurePrivateDir(nested, { create: true });
    expect(modeOf(nested)).to.equal(0o700);
    ensurePrivateDir(nested, { create: true });
  });

  it('refuses a regular file where the store directory should be', () => {
    fs.writeFileSync(dir, '');
    expect(() => ensurePrivateDir(dir, { create: true })).to.throw('is a regular file, not a directory');
  });

  it('refuses a directory where a store file should be', () => {
    fs.mkdirSync(dir, { mode: 0o700 });
    expect(() => checkPrivateFile(dir)).to.throw('is a directory, not a regular file').with.property('code', 'store_permissions');
  });

  it('refuses to report the identity of a symlink', () => {
    const target = path.join(root, 'target');
    fs.writeFileSync(target, '', { mode: 0o600 });
    fs.symlinkSync(target, path.join(root, 'link'));
    expect(() => storeFileIdentity(path.join(root, 'link'))).to.throw('symbolic link');
    expect(storeFileIdentity(target).ino).to.equal(fs.lstatSync(target).ino);
  });

  describe('replacing a small file (service.json, a lock\'s pid file, executor.statements)', () => {
    it('writes it whole at 0600 whatever the umask, over an old one and over what a killed write left at <file>.next', () => {
      const file = path.join(root, 'service.json');
      fs.writeFileSync(file, 'old\n', { mode: 0o600 });
      fs.writeFileSync(`${file}.next`, 'half a wri', { mode: 0o644 });
      const umask = process.umask(0o277); // would leave the file 0400
      try {
        replacePrivateFile(file, 'new\n', { durable: true });
      } finally {
        process.umask(umask);
      }
      expect(fs.readFileSync(file, 'utf8')).to.equal('new\n');
      expect(modeOf(file)).to.equal(0o600);
      expect(fs.existsSync(`${file}.next`)).to.equal(false);
    });

    it('never writes through a symlink planted at <file>.next', () => {
      const file = path.join(root, 'executor.statements');
      const target = path.join(root, 'elsewhere');
      fs.writeFileSync(target, 'untouched\n', { mode: 0o600 });
      fs.symlinkSync(target, `${file}.next`);
      replacePrivateFile(file, 'statement\n', { durable: false });
      expect(fs.readFileSync(target, 'utf8')).to.equal('untouched\n');
      expect(fs.lstatSync(file).isFile()).to.equal(true);
      expect(fs.readFileSync(file, 'utf8')).to.equal('statement\n');
    });

    it('leaves the old file as it was when the write cannot be made (a directory stands where <file>.next goes)', () => {
      const file = path.join(root, 'store.lock.pid');
      fs.writeFileSync(file, '41\n', { mode: 0o600 });
      fs.mkdirSync(`${file}.next`);
      expect(() => replacePrivateFile(file, '42\n', { durable: true })).to.throw();
      expect(fs.readFileSync(file, 'utf8')).to.equal('41\n');
    });
  });
});

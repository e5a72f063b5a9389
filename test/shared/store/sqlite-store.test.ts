import { execFileSync, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import Database from 'better-sqlite3';
import { expect } from 'chai';
import { type CustodyError, isCustodyError, type ErrorCode } from '../../../shared/errors.js';
import { openStore, proveWritable, provisionStore, STORE_BUSY_TIMEOUT_MS, storeFileIdentity } from '../../../shared/store/sqlite-store.js';
import { IS_ROOT, MODE_BOUND, modeBoundAvailable } from '../../helpers/mode-bound.js';
import { CREATE_ITEMS, CREATE_NOTES, makeTempRoot, modeOf, removeTempRoot, specIn } from './helpers.js';

function expectRefusal(action: () => unknown, code: ErrorCode): CustodyError {
  try {
    action();
  } catch (error) {
    if (isCustodyError(error, code)) return error;
    throw error;
  }
  expect.fail(`expected a ${code} refusal`);
}

function sqlite3Available(): boolean {
  try {
    execFileSync('sqlite3', ['-version'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

const SQLITE_STORE_MODULE = new URL('../../../shared/store/sqlite-store.js', import.meta.url).href;
/** Opens the store in argv[2]'s directory and prints what it was refused with. */
const OPEN_AND_SAY = `
const { openStore } = await import(process.argv[1]);
const spec = { label: 'test', dir: process.argv[2], file: 'test.db', migrations: [
  { version: 1, description: 'items', sql: ${JSON.stringify(CREATE_ITEMS.sql)} },
  { version: 2, description: 'notes on items', sql: ${JSON.stringify(CREATE_NOTES.sql)} },
] };
try { openStore(spec).close(); console.log(JSON.stringify({ code: 'opened', message: '' })); }
catch (error) { console.log(JSON.stringify({ code: error.code, message: error.message })); }
`;

describe('sqlite store', () => {
  let root: string;
  let dir: string;
  let file: string;
  const open: Database.Database[] = [];

  beforeEach(() => {
    root = makeTempRoot();
    dir = path.join(root, 'state', 'kernel');
    file = path.join(dir, 'test.db');
  });

  afterEach(() => {
    for (const db of open.splice(0)) if (db.open) db.close();
    removeTempRoot(root);
  });

  function keep(db: Database.Database): Database.Database {
    open.push(db);
    return db;
  }

  describe('provisioning', () => {
    it('creates a 0700 directory and a 0600 database in WAL mode with full sync, foreign keys and the latest schema', () => {
      const db = keep(provisionStore(specIn(dir)));
      expect(modeOf(dir)).to.equal(0o700);
      expect(modeOf(file)).to.equal(0o600);
      expect(db.pragma('journal_mode', { simple: true })).to.equal('wal');
      expect(db.pragma('synchronous', { simple: true })).to.equal(2);
      expect(db.pragma('foreign_keys', { simple: true })).to.equal(1);
      expect(db.pragma('temp_store', { simple: true })).to.equal(2);
      expect(db.pragma('busy_timeout', { simple: true })).to.equal(STORE_BUSY_TIMEOUT_MS);
      expect(db.pragma('user_version', { simple: true })).to.equal(2);
      expect(() => db.prepare('INSERT INTO notes (item_id, text) VALUES (42, ?)').run('dangling')).to.throw(/FOREIGN KEY/);
    });

    it('refuses an existing store with store_exists and leaves its file byte-identical', () => {
      const first = provisionStore(specIn(dir));
      first.prepare('INSERT INTO items (body) VALUES (?)').run('kept');
      first.close();
      const before = fs.readFileSync(file);
      const statBefore = fs.statSync(file);

      const refusal = expectRefusal(() => provisionStore(specIn(dir)), 'store_exists');
      expect(refusal.message).to.include(file);
      expect(fs.readFileSync(file).equals(before)).to.equal(true);
      expect(fs.statSync(file).mtimeMs).to.equal(statBefore.mtimeMs);
      const db = keep(openStore(specIn(dir)));
      expect(db.prepare('SELECT body FROM items').pluck().all()).to.deep.equal(['kept']);
    });

    it('refuses a leftover -wal file, which SQLite would replay into the new store', () => {
      fs.mkdirSync(dir, { recursive: true, mode: 0o700 });
      fs.writeFileSync(`${file}-wal`, 'old frames', { mode: 0o600 });
      const refusal = expectRefusal(() => provisionStore(specIn(dir)), 'store_exists');
      expect(refusal.message).to.include(`${file}-wal`);
      expect(fs.existsSync(file)).to.equal(false);
    });

    it('refuses a loose existing directory instead of tightening it', () => {
      fs.mkdirSync(dir, { recursive: true });
      fs.chmodSync(dir, 0o755);
      const refusal = expectRefusal(() => provisionStore(specIn(dir)), 'store_permissions');
      expect(refusal.message).to.include(dir).and.include('chmod 700');
      expect(modeOf(dir)).to.equal(0o755);
      expect(fs.existsSync(file)).to.equal(false);
    });

    it('makes the directory 0700 and every store file 0600 even under umask 000', () => {
      const previous = process.umask(0);
      try {
        const db = keep(provisionStore(specIn(dir)));
        db.prepare('INSERT INTO items (body) VALUES (?)').run('x');
        expect(modeOf(dir)).to.equal(0o700);
        for (const target of [file, `${file}-wal`, `${file}-shm`]) expect(modeOf(target), target).to.equal(0o600);
      } finally {
        process.umask(previous);
      }
    });

    it('refuses a migration list that is not numbered 1..n in order', () => {
      const refusal = expectRefusal(() => provisionStore(specIn(dir, [CREATE_NOTES])), 'store_schema');
      expect(refusal.message).to.include('expected 1');
      expect(fs.existsSync(dir)).to.equal(false);
    });
  });

  describe('opening', () => {
    it('refuses a missing store with store_missing, says how to provision it and creates nothing', () => {
      const refusal = expectRefusal(() => openStore(specIn(dir)), 'store_missing');
      expect(refusal.message).to.include(file).and.include('custody init');
      expect(fs.existsSync(dir)).to.equal(false);
    });

    it('applies a new migration to a store written by an older build', () => {
      provisionStore(specIn(dir, [CREATE_ITEMS])).close();
      const db = keep(openStore(specIn(dir, [CREATE_ITEMS, CREATE_NOTES])));
      expect(db.pragma('user_version', { simple: true })).to.equal(2);
      db.prepare('INSERT INTO items (id, body) VALUES (1, ?)').run('a');
      db.prepare('INSERT INTO notes (item_id, text) VALUES (1, ?)').run('n');
    });

    it('refuses a store whose schema is newer than this build with store_schema', () => {
      provisionStore(specIn(dir)).close();
      const refusal = expectRefusal(() => openStore(specIn(dir, [CREATE_ITEMS])), 'store_schema');
      expect(refusal.message).to.include('schema version 2').and.include('(1)');
    });

    it('rolls back a failing migration and leaves the store at its previous version', () => {
      provisionStore(specIn(dir, [CREATE_ITEMS])).close();
      const broken = { version: 2, description: 'broken', sql: 'CREATE TABLE half (id INTEGER); SELECT * FROM no_such_table' };
      const refusal = expectRefusal(() => openStore(specIn(dir, [CREATE_ITEMS, broken])), 'store_schema');
      expect(refusal.message).to.include('migration 2 (broken)');
      const db = keep(openStore(specIn(dir, [CREATE_ITEMS])));
      expect(db.pragma('user_version', { simple: true })).to.equal(1);
      expect(db.prepare("SELECT count(*) FROM sqlite_master WHERE name = 'half'").pluck().get()).to.equal(0);
    });

    it('refuses a SQLite file that was never provisioned (user_version 0)', () => {
      fs.mkdirSync(dir, { recursive: true, mode: 0o700 });
      new Database(file).close();
      fs.chmodSync(file, 0o600);
      expect(expectRefusal(() => openStore(specIn(dir)), 'store_schema').message).to.include('user_version 0');
    });

    it('refuses a file that is not a SQLite database with store_schema', () => {
      fs.mkdirSync(dir, { recursive: true, mode: 0o700 });
      fs.writeFileSync(file, 'not a database, just words long enough to fill a header. '.repeat(10), { mode: 0o600 });
      expect(expectRefusal(() => openStore(specIn(dir)), 'store_schema').message).to.include(file);
    });

    it('keeps the WAL and SHM files at 0600 after writes', () => {
      provisionStore(specIn(dir)).close();
      const db = keep(openStore(specIn(dir)));
      const insert = db.prepare('INSERT INTO items (body) VALUES (?)');
      db.transaction(() => {
        for (let i = 0; i < 100; i += 1) insert.run(`row ${i}`);
      })();
      expect(fs.statSync(`${file}-wal`).size).to.be.greaterThan(0);
      expect(modeOf(`${file}-wal`)).to.equal(0o600);
      expect(modeOf(`${file}-shm`)).to.equal(0o600);
    });

    it('lets an operator read the store with the sqlite3 shell while it is open', function () {
      if (!sqlite3Available()) {
        if (process.env.CI === 'true') throw new Error('sqlite3 shell missing; CI requires it');
        this.skip();
      }
      const db = keep(provisionStore(specIn(dir)));
      db.prepare('INSERT INTO items (body) VALUES (?)').run('visible');
      const out = execFileSync('sqlite3', [file, 'SELECT body FROM items;'], { encoding: 'utf8' });
      expect(out.trim()).to.equal('visible');
    });

    it('refuses a store its user cannot write (SQLite would open it read-only in silence), naming the files to chmod', function () {
      provisionStore(specIn(dir)).close();
      fs.chmodSync(file, 0o400);
      if (!IS_ROOT) {
        const refusal = expectRefusal(() => openStore(specIn(dir)), 'store_permissions');
        expect(refusal.message).to.include('cannot be written by this process').and.include(`chmod 600 ${file}`);
        return;
      }
      // Root writes any file: the same open, held to the file's mode (test/helpers/mode-bound.ts), in a process of its own.
      if (!modeBoundAvailable()) {
        console.warn('  skipped: root here cannot drop CAP_DAC_OVERRIDE (setpriv from util-linux, and CAP_SETPCAP, are needed)');
        this.skip();
      }
      const opened = spawnSync(MODE_BOUND[0]!, [...MODE_BOUND.slice(1), process.execPath, '--input-type=module', '-e', OPEN_AND_SAY, SQLITE_STORE_MODULE, dir], { encoding: 'utf8' });
      expect(opened.stderr).to.equal('');
      const said = JSON.parse(opened.stdout) as { code: string; message: string };
      expect(said.code).to.equal('store_permissions');
      expect(said.message).to.include('uid 0').and.include(`chmod 600 ${file}`);
    });

    it('proves the store takes a write by one rolled back: a read-only connection is refused store_permissions and nothing is written', () => {
      provisionStore(specIn(dir)).close();
      fs.chmodSync(file, 0o400);
      const before = fs.readFileSync(file);
      const readOnly = keep(new Database(file, { readonly: true }));
      const refusal = expectRefusal(() => proveWritable(specIn(dir), file, readOnly), 'store_permissions');
      expect(refusal.message).to.include('attempt to write a readonly database').and.include(`chmod 600 ${file}`);
      expect(readOnly.inTransaction, 'the probe rolled back').to.equal(false);
      expect(fs.readFileSync(file).equals(before), 'the store file is unchanged').to.equal(true);
    });

    it('opens at once while another connection holds a write transaction (the write probe waits for no lock)', () => {
      provisionStore(specIn(dir)).close();
      const holder = keep(new Database(file));
      holder.exec('BEGIN IMMEDIATE');
      const started = performance.now();
      const db = keep(openStore(specIn(dir)));
      expect(performance.now() - started).to.be.below(STORE_BUSY_TIMEOUT_MS / 2);
      expect(db.pragma('busy_timeout', { simple: true }), 'the busy timeout is back').to.equal(STORE_BUSY_TIMEOUT_MS);
      expect(db.inTransaction).to.equal(false);
      holder.exec('ROLLBACK');
    });

    it('reports the file identity as the device and inode of the store file', () => {
      provisionStore(specIn(dir)).close();
      const stat = fs.lstatSync(file);
      expect(storeFileIdentity(file)).to.deep.equal({ dev: stat.dev, ino: stat.ino });
    });
  });
  describe('temporary data', () => {
    /** Files SQLite holds open in /var/tmp (or SQLITE_TMPDIR): created, unlinked at once, closed at commit. */
    const openTempFiles = () =>
      fs.readdirSync('/proc/self/fd').flatMap((fd) => {
        try {
          return [fs.readlinkSync(`/proc/self/fd/${fd}`)];
        } catch {
          return [];
        }
      }).filter((target) => target.includes('etilqs_'));

    /** A transaction whose second statement rewrites ~200 KiB of pages the first one made dirty: its statement journal passes 64 KiB. */
    function bigStatementJournal(db: Database.Database): string[] {
      db.exec('BEGIN IMMEDIATE');
      try {
        db.prepare("INSERT INTO items (body) SELECT printf('%.2000c', 'y') FROM json_each(?)").run(JSON.stringify(Array.from({ length: 100 }, (_, i) => i)));
        db.prepare("UPDATE items SET body = body || 'z'").run();
        return openTempFiles();
      } finally {
        db.exec('COMMIT');
      }
    }

    it('keeps statement journals in memory: a large statement inside a transaction opens no temporary file', () => {
      provisionStore(specIn(dir)).close();
      const db = keep(openStore(specIn(dir)));
      expect(bigStatementJournal(db)).to.deep.equal([]);
      // The same transaction on a connection with SQLite's default temp_store spills into a file: the check above can see one.
      const plain = keep(new Database(file));
      expect(bigStatementJournal(plain)).to.have.length(1);
    });
  });
});

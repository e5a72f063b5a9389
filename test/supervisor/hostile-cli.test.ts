// Hostile input at the CLI (issue 8, reproductions 4 and 5; docs/SECURITY.md
// "The CLI"): names, @FILE arguments and ports are refused with exit 2
// before anything is sent or written, and `receipt export` writes only
// inside the directory it names.
//
// Several cases run against a state directory with no service: a command
// that got past its own checks would try to reach the service and exit 5,
// so exit 2 proves the refusal came first, with nothing sent.
import { expect } from 'chai';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { type TestService, custody, startService } from '../helpers/service.js';

describe('hostile input at the CLI', function () {
  this.timeout(60_000);
  let scratch: string;
  /** A state directory with a custody.json and no running service. */
  let idle: string;

  before(() => {
    scratch = mkdtempSync(path.join(tmpdir(), 'custody-cli-'));
    idle = path.join(scratch, 'idle');
    mkdirSync(idle);
    writeFileSync(path.join(idle, 'custody.json'), JSON.stringify({ kernel: { settings: { argument_bytes_default: 1000 } } }));
  });

  after(() => rmSync(scratch, { recursive: true, force: true }));

  const cli = (args: readonly string[], cwd = scratch) => custody(['--state', idle, ...args], { cwd });

  describe('names (reproduction 4)', () => {
    const CASES: Array<[string, string[]]> = [
      ['invoke --request-id', ['invoke', 'review-notes/append', '--arg', 'note=x', '--request-id', 'a/../../../evil']],
      ['authorize --operation', ['authorize', 'review-notes/append', '--arg', 'note=x', '--operation', 'a/../../x']],
      ['execute NAME', ['execute', '../x']],
      ['report NAME', ['report', '.hidden']],
      ['reconcile NAME', ['reconcile', 'a b']],
      ['trace NAME', ['trace', 'a/b']],
      ['receipt export NAME', ['receipt', 'export', 'a/../../../evil']],
    ];
    for (const [what, args] of CASES) {
      it(`refuses a bad name in ${what} with exit 2 (name_invalid) before reaching for the service`, async () => {
        const result = await cli(args);
        expect(result.code, result.stderr).to.equal(2);
        expect(result.stderr).to.contain('[name_invalid]').and.to.contain('letters, digits');
      });
    }

    it('receipt export of a/../../../evil creates nothing, inside or outside the working directory', async () => {
      const cwd = path.join(scratch, 'a', 'b', 'c');
      mkdirSync(cwd, { recursive: true });
      await cli(['receipt', 'export', 'a/../../../evil'], cwd);
      expect(readdirSync(cwd)).to.deep.equal([]);
      expect(existsSync(path.join(scratch, 'evil-artifacts'))).to.equal(false);
    });
  });

  it('refuses --arg __proto__=… with exit 2 (usage) before reaching for the service: the object the CLI builds would drop it', async () => {
    const result = await cli(['invoke', 'review-notes/append', '--arg', 'note=x', '--arg', '__proto__=y']);
    expect(result.code, result.stderr).to.equal(2);
    expect(result.stderr).to.contain('[usage]').and.to.contain('__proto__');
  });

  it('refuses an inline --arg value that is not UTF-8 as given (Node would have signed U+FFFD for each bad byte) with exit 2, and takes a real U+FFFD', async () => {
    // argv of raw bytes needs a shell: Node's spawn encodes its arguments as UTF-8.
    const run = (value: string) =>
      custody([], { prefix: ['/bin/sh', '-c', `exec "$0" "$@" --state "${idle}" invoke review-notes/append --arg "note=$(printf '${value}')"`] });
    for (const bad of ['bad\\377byte', 'lone \\355\\240\\200 surrogate']) {
      const refused = await run(bad);
      expect(refused.code, refused.stderr).to.equal(2);
      expect(refused.stderr).to.contain('[encoding_invalid]').and.to.contain('--arg note');
    }
    // The character itself, in UTF-8: past the check, so the CLI reaches for the service (none runs here: exit 5).
    const real = await run('real \\357\\277\\275 replacement');
    expect(real.stderr).to.not.contain('encoding_invalid');
    expect(real.code, real.stderr).to.equal(5);
  });

  describe('@FILE arguments (reproduction 5)', () => {
    it('refuses a binary file with exit 2 (encoding_invalid), naming the byte offset', async () => {
      const file = path.join(scratch, 'binary.dat');
      const bytes = Buffer.alloc(1024, 0x61);
      bytes[700] = 0xff;
      writeFileSync(file, bytes);
      // The 1 KB file, under the default 32 KiB bound (a state directory without custody.json).
      const result = await custody(['--state', path.join(scratch, 'no-config'), 'invoke', 'review-notes/append', '--arg', `note=@${file}`]);
      expect(result.code, result.stderr).to.equal(2);
      expect(result.stderr).to.contain('[encoding_invalid]').and.to.contain('byte offset 700');
    });

    it('refuses @/dev/zero at once with exit 2 (file_too_large), without reading past the bound', async function () {
      if (!existsSync('/dev/zero')) this.skip();
      const started = Date.now();
      const result = await cli(['invoke', 'review-notes/append', '--arg', 'note=@/dev/zero']);
      expect(result.code, result.stderr).to.equal(2);
      expect(result.stderr).to.contain('[file_too_large]').and.to.contain('1000 bytes');
      expect(Date.now() - started, 'answered without reading without bound').to.be.below(30_000);
    });

    it('reads a file of exactly the configured argument bound and refuses one byte more', async () => {
      const at = path.join(scratch, 'at.txt');
      const past = path.join(scratch, 'past.txt');
      writeFileSync(at, 'x'.repeat(1000));
      writeFileSync(past, 'x'.repeat(1001));
      const accepted = await cli(['invoke', 'review-notes/append', '--arg', `note=@${at}`]);
      expect(accepted.code, `read, then the service was looked for: ${accepted.stderr}`).to.equal(5);
      const refused = await cli(['invoke', 'review-notes/append', '--arg', `note=@${past}`]);
      expect(refused.code).to.equal(2);
      expect(refused.stderr).to.contain('[file_too_large]');
    });

    it('uses the kernel default of 32 KiB when custody.json says nothing', async () => {
      const bare = path.join(scratch, 'bare');
      mkdirSync(bare, { recursive: true });
      const at = path.join(scratch, 'at32k.txt');
      const past = path.join(scratch, 'past32k.txt');
      writeFileSync(at, 'y'.repeat(32 * 1024));
      writeFileSync(past, 'y'.repeat(32 * 1024 + 1));
      expect((await custody(['--state', bare, 'invoke', 'review-notes/append', '--arg', `note=@${at}`])).code).to.equal(5);
      const refused = await custody(['--state', bare, 'invoke', 'review-notes/append', '--arg', `note=@${past}`]);
      expect(refused.code).to.equal(2);
      expect(refused.stderr).to.contain('32768 bytes');
    });
  });

  describe('custody start --port (reproduction 5)', () => {
    for (const port of ['99999', '65536', '-1', '1.5', 'abc', '']) {
      it(`refuses --port=${JSON.stringify(port)} with exit 2 and creates no state directory`, async () => {
        const state = path.join(scratch, `never-${Buffer.from(port).toString('hex')}`);
        const result = await custody(['start', '--state', state, `--port=${port}`]);
        expect(result.code, result.stderr).to.equal(2);
        expect(existsSync(state), 'the state directory was not created').to.equal(false);
      });
    }
  });
});

describe('custody receipt export writes only inside the directory it names', function () {
  this.timeout(60_000);
  let service: TestService;
  let scratch: string;

  before(async () => {
    service = await startService();
    scratch = mkdtempSync(path.join(tmpdir(), 'custody-export-'));
    const done = await service.cli(['invoke', 'review-notes/append', '--arg', 'note=exported', '--request-id', 'exp-1']);
    expect(done.code, done.stderr).to.equal(0);
  });

  after(async () => {
    await service.stop();
    service.cleanup();
    rmSync(scratch, { recursive: true, force: true });
  });

  it('exports into a fresh directory', async () => {
    const out = path.join(scratch, 'fresh');
    const result = await service.cli(['receipt', 'export', 'exp-1', '--out', out]);
    expect(result.code, result.stderr).to.equal(0);
    expect(readdirSync(out).sort()).to.deep.equal(['authorization.json', 'executor-default.e1.pub', 'kernel.e1.pub', 'receipt-1-reserve.json', 'receipt-2-completion.json', 'report.json']);
  });

  it('refuses an --out that is a symlink to elsewhere, and writes nothing there', async () => {
    const elsewhere = path.join(scratch, 'elsewhere');
    mkdirSync(elsewhere);
    const link = path.join(scratch, 'link');
    symlinkSync(elsewhere, link);
    const result = await service.cli(['receipt', 'export', 'exp-1', '--out', link]);
    expect(result.code).to.equal(2);
    expect(result.stderr).to.contain('symbolic link');
    expect(readdirSync(elsewhere)).to.deep.equal([]);
  });

  it('refuses to write through a symlink planted inside the directory', async () => {
    const out = path.join(scratch, 'planted');
    mkdirSync(out);
    const victim = path.join(scratch, 'victim.txt');
    symlinkSync(victim, path.join(out, 'report.json'));
    const result = await service.cli(['receipt', 'export', 'exp-1', '--out', out]);
    expect(result.code).to.equal(2);
    expect(result.stderr).to.contain('symbolic link');
    expect(existsSync(victim), 'nothing was created through the link').to.equal(false);
  });
});

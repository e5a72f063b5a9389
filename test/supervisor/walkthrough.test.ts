// The README walkthrough, through the CLI against a real service, with the
// journal, the exported files and the stores checked.
import { expect } from 'chai';
import { mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { type TestService, custody, sqlite, startService } from '../helpers/service.js';

const NOTE = 'Reviewed PR #421: the fixture for #414 carries an injected comment; do not merge.\n';

describe('the walkthrough, through the CLI', function () {
  this.timeout(60_000);
  let service: TestService;
  let work: string;
  const journal = () => readFileSync(path.join(service.paths.resourcesDir, 'review-notes.jsonl'), 'utf8').split('\n').filter(Boolean);

  before(async () => {
    service = await startService();
    work = mkdtempSync(path.join(tmpdir(), 'custody-walk-'));
    writeFileSync(path.join(work, 'review.txt'), NOTE);
  });

  after(async () => {
    await service.stop();
    service.cleanup();
    rmSync(work, { recursive: true, force: true });
  });

  it('authorizes, executes and reports note-1, printing the note', async () => {
    const authorized = await service.cli(['authorize', 'review-notes/append', '--arg', `note=@${path.join(work, 'review.txt')}`, '--operation', 'note-1']);
    expect(authorized.code, authorized.stderr).to.equal(0);
    expect(authorized.stdout).to.match(/^Authorized: note-1/);
    expect(journal, 'nothing is appended before execute').to.throw();

    const executed = await service.cli(['execute', 'note-1']);
    expect(executed.code, executed.stderr).to.equal(0);
    expect(executed.stdout).to.match(/^Signed report retained: note-1/);
    expect(journal()).to.have.length(1);

    const reported = await service.cli(['report', 'note-1']);
    expect(reported.code, reported.stderr).to.equal(0);
    expect(reported.stdout).to.equal(`Completed: original report settled.\n\n${NOTE}`);
    const line = JSON.parse(journal()[0]!) as { note: string; sha256: string };
    expect(line.note).to.equal(NOTE);
    expect(line.sha256).to.equal('1237fdc278c34d32ab1e023f63d4b5e97922b13d18328e7f13783bb4d337e75f');
  });

  it('exports every retained artifact as its exact bytes, and each verifies offline against kernel.pub', async () => {
    const out = path.join(work, 'note-1');
    const exported = await service.cli(['receipt', 'export', 'note-1', '--out', out, '--json']);
    expect(exported.code, exported.stderr).to.equal(0);
    const files = readdirSync(out).sort();
    // The signers' keys by role and epoch, listed: no kernel.pub of whatever key is current now (after a rotation, not the signer's).
    expect(files).to.include.members(['authorization.json', 'report.json', 'kernel.e1.pub']);
    expect(files).to.not.include('kernel.pub');
    expect((JSON.parse(exported.stdout) as { keys: Array<{ file: string }> }).keys.map((key) => path.basename(key.file))).to.include('kernel.e1.pub');
    const receipts = files.filter((f) => f.startsWith('receipt-'));
    expect(receipts.length).to.be.at.least(2);
    const pub = service.paths.kernelPub;
    for (const file of [...receipts, 'authorization.json']) {
      const verified = await custody(['receipt', 'verify', path.join(out, file), '--trusted-kernel-pubkey', pub]);
      expect(verified.code, `${file}: ${verified.stderr}`).to.equal(0);
      const byExported = await custody(['receipt', 'verify', path.join(out, file), '--trusted-kernel-pubkey', path.join(out, 'kernel.e1.pub')]);
      expect(byExported.code, `${file} against the exported key: ${byExported.stderr}`).to.equal(0);
      expect(verified.stdout).to.match(/^Verified /);
    }
    const report = await custody(['receipt', 'verify', path.join(out, 'report.json'), '--trusted-kernel-pubkey', pub, '--trusted-executor-pubkey', service.paths.executorPub('default')]);
    expect(report.code, report.stderr).to.equal(0);

    const tampered = path.join(work, 'tampered.json');
    writeFileSync(tampered, readFileSync(path.join(out, receipts[receipts.length - 1]!), 'utf8').replace('"verdict":"allow"', '"verdict":"deny"'));
    const refused = await custody(['receipt', 'verify', tampered, '--trusted-kernel-pubkey', pub]);
    expect(refused.code).to.equal(3);
    expect(refused.stderr).to.contain('signature_invalid');
  });

  it('drops the reply of note-2 (exit 75), then replays the byte-identical report and receipt', async () => {
    await service.cli(['authorize', 'review-notes/append', '--arg', `note=@${path.join(work, 'review.txt')}`, '--operation', 'note-2']);
    const dropped = await service.cli(['execute', 'note-2', '--drop-reply']);
    expect(dropped.code).to.equal(75);
    expect(dropped.stderr).to.contain('reply_dropped');
    expect(journal()).to.have.length(2);

    const first = JSON.parse((await service.cli(['execute', 'note-2', '--json'])).stdout) as { report: string };
    const second = JSON.parse((await service.cli(['execute', 'note-2', '--json'])).stdout) as { report: string };
    expect(second.report).to.equal(first.report);

    const reportedOnce = await service.cli(['report', 'note-2', '--json']);
    const reportedTwice = await service.cli(['report', 'note-2', '--json']);
    expect(reportedOnce.code).to.equal(0);
    expect((JSON.parse(reportedTwice.stdout) as { receipt: string }).receipt).to.equal((JSON.parse(reportedOnce.stdout) as { receipt: string }).receipt);

    const a = path.join(work, 'export-a');
    const b = path.join(work, 'export-b');
    await service.cli(['receipt', 'export', 'note-2', '--out', a]);
    await service.cli(['receipt', 'export', 'note-2', '--out', b]);
    for (const file of readdirSync(a)) expect(readFileSync(path.join(b, file)).equals(readFileSync(path.join(a, file))), file).to.equal(true);
    expect(journal(), 'one line per completed operation').to.have.length(2);
  });

  it('denies the 5th invocation of the default 4-invocation grant (exit 3) and lists every operation', async () => {
    expect((await service.cli(['invoke', 'review-notes/append', '--arg', 'note=three'])).code).to.equal(0);
    expect((await service.cli(['invoke', 'review-notes/append', '--arg', 'note=four', '--request-id', 'four'])).code).to.equal(0);
    const fifth = await service.cli(['invoke', 'review-notes/append', '--arg', 'note=five', '--request-id', 'five']);
    expect(fifth.code).to.equal(3);
    expect(fifth.stdout).to.contain('budget_exhausted');
    const again = await service.cli(['invoke', 'review-notes/append', '--arg', 'note=four', '--request-id', 'four', '--json']);
    expect(again.code, 'the same request is answered the same way').to.equal(0);
    const conflict = await service.cli(['invoke', 'review-notes/append', '--arg', 'note=changed', '--request-id', 'four']);
    expect(conflict.code).to.equal(3);
    expect(conflict.stderr).to.contain('request_conflict');
    const ops = JSON.parse((await service.cli(['ops', '--json'])).stdout) as { operations: Array<{ name: string; state: string }> };
    expect(ops.operations.map((o) => o.state).sort()).to.deep.equal(['completed', 'completed', 'completed', 'completed', 'denied']);
    expect(journal()).to.have.length(4);
  });

  it('traces an operation across the three stores', async () => {
    const traced = JSON.parse((await service.cli(['trace', 'note-2', '--json'])).stdout) as { events: Array<{ store: string; event: string }>; claim: { report_status: string } };
    const stores = new Set(traced.events.map((e) => e.store.split(' ')[0]));
    expect([...stores].sort()).to.deep.equal(['executor', 'kernel', 'supervisor']);
    expect(traced.events.map((e) => e.event)).to.include.members(['reply_dropped', 'authorization signed']);
    expect(traced.claim.report_status).to.equal('completed');
  });

  it('leaves each store readable with the sqlite3 shell while the service runs', async () => {
    const ops = await sqlite(path.join(service.paths.kernelDir, 'kernel.db'), 'SELECT request_id, state FROM operations_view ORDER BY request_id');
    expect(ops.map((r) => r.request_id)).to.include.members(['note-1', 'note-2', 'four', 'five']);
    const holds = await sqlite(path.join(service.paths.kernelDir, 'kernel.db'), 'SELECT * FROM holds_view');
    expect(holds.length).to.be.at.least(4);
    const receipts = await sqlite(path.join(service.paths.kernelDir, 'kernel.db'), 'SELECT count(*) AS n FROM receipts_view');
    expect(Number(receipts[0]!.n)).to.be.at.least(8);
    const claims = await sqlite(path.join(service.paths.executorDir('default'), 'ledger.db'), 'SELECT * FROM claims_view');
    expect(claims).to.have.length(4);
    const requests = await sqlite(path.join(service.paths.supervisorDir, 'supervisor.db'), 'SELECT request_id, phase, outcome FROM requests_view');
    expect(requests.find((r) => r.request_id === 'five')).to.include({ phase: 'refused', outcome: 'denied' });
    const children = await sqlite(path.join(service.paths.supervisorDir, 'supervisor.db'), 'SELECT name, state FROM children_view');
    expect(children.map((c) => c.state)).to.deep.equal(['running', 'running']);
  });

  it('verifies a receipt taken straight from kernel.db with the sqlite3 shell', async () => {
    const { execFileSync } = await import('node:child_process');
    const text = execFileSync('sqlite3', ['-readonly', path.join(service.paths.kernelDir, 'kernel.db'), "SELECT receipt FROM receipts WHERE decision = 'completion' LIMIT 1"], { encoding: 'utf8' });
    expect(text.endsWith('\n'), 'the shell ends its output with a newline').to.equal(true);
    const file = path.join(work, 'from-sqlite.json');
    writeFileSync(file, text);
    const verified = await custody(['receipt', 'verify', file, '--trusted-kernel-pubkey', service.paths.kernelPub]);
    expect(verified.code, verified.stderr).to.equal(0);
    writeFileSync(file, text + '\n');
    expect((await custody(['receipt', 'verify', file, '--trusted-kernel-pubkey', service.paths.kernelPub])).code, 'only one final newline is ignored').to.equal(3);
  });

  it('shows the children in status and stops cleanly on SIGTERM, exit 0', async () => {
    const status = await service.cli(['status']);
    expect(status.code).to.equal(0);
    expect(status.stdout).to.match(/kernel\s+kernel\s+running/).and.to.match(/default\s+executor\s+running/);
    expect(await service.stop()).to.equal(0);
    const after = await service.cli(['status']);
    expect(after.code, 'service unreachable').to.equal(5);
  });
});

// custody export: operations and incidents as NDJSON, one object per line,
// read back line by line with ndjson's own parser and held against the API.
import { expect } from 'chai';
import ndjson from 'ndjson';
import { spawn } from 'node:child_process';
import { PassThrough, Readable } from 'node:stream';
import { connect } from '../../../supervisor/cli/client.js';
import { exportCommand } from '../../../supervisor/cli/commands/export.js';
import { MAX_TIMESTAMP_MS } from '../../../shared/protocol/common.js';
import { until } from '../../helpers/eventually.js';
import { CLI, type TestService, startService } from '../../helpers/service.js';
import { CLI_EXIT } from '../../../shared/exit-codes.js';

/** Parse stdout as NDJSON, strictly: a line that is not one JSON object fails the test. */
async function parseLines(text: string): Promise<Array<Record<string, unknown>>> {
  const records: Array<Record<string, unknown>> = [];
  const parser = Readable.from([text]).pipe(ndjson.parse({ strict: true }));
  for await (const record of parser) records.push(record as Record<string, unknown>);
  return records;
}

describe('custody export', function () {
  this.timeout(60_000);
  let service: TestService;

  before(async () => {
    service = await startService();
    expect((await service.cli(['invoke', 'review-notes/append', '--arg', 'note=exported', '--request-id', 'export-1'])).code).to.equal(0);
    await service.cli(['authorize', 'review-notes/append', '--arg', 'note=dropped', '--operation', 'export-2']);
    expect((await service.cli(['execute', 'export-2', '--drop-reply'])).code, 'the drill records an incident').to.equal(75);
    // The dropped reply is reconciled in the background; the export is compared with the API once both read the same end.
    await until('export-2 reconciled and settled', async () => {
      const { body } = await service.http('GET', '/v1/operations/export-2', undefined, 'agent');
      return (body.request as { phase?: string } | null)?.phase === 'settled' ? true : undefined;
    });
  });

  after(async () => {
    await service.stop();
    service.cleanup();
  });

  it('writes every operation and incident as one JSON object per line, each tagged with its record type', async () => {
    const result = await service.cli(['export']);
    expect(result.code).to.equal(0);
    expect(result.stdout.endsWith('\n')).to.equal(true);
    const lines = result.stdout.slice(0, -1).split('\n');
    const records = await parseLines(result.stdout);
    expect(records).to.have.length(lines.length);

    const operations = records.filter((r) => r.record === 'operation');
    const incidents = records.filter((r) => r.record === 'incident');
    expect(operations.length + incidents.length, 'no other record types').to.equal(records.length);
    expect(operations.map((op) => op.name)).to.include.members(['export-1', 'export-2']);
    expect(operations.find((op) => op.name === 'export-1')).to.include({ state: 'completed', phase: 'settled' });
    expect(incidents.map((i) => i.kind)).to.include('reply_dropped');

    const api = await service.http('GET', '/v1/operations?limit=100', undefined, 'agent');
    expect(operations.map(({ record: _record, ...op }) => op)).to.deep.equal(api.body.operations);
    expect(api.body.next_after, 'one page held them all').to.equal(null);
  });

  it('pages the listing: each answer gives the key the next page starts after, and the export reads every page, writing each operation once', async () => {
    expect((await service.cli(['invoke', 'review-notes/append', '--arg', 'note=third', '--request-id', 'export-3'])).code).to.equal(0);
    const all = (await service.http('GET', '/v1/operations', undefined, 'agent')).body as { operations: Array<{ name: string; operation_id: string }>; next_after: string | null };
    expect(all.operations.map((op) => op.name)).to.deep.equal(['export-3', 'export-2', 'export-1']);
    const pages: string[][] = [];
    const keys: string[] = [];
    let after: string | null = null;
    do {
      const { body } = await service.http('GET', `/v1/operations?limit=2${after === null ? '' : `&after=${after}`}`, undefined, 'agent');
      pages.push((body.operations as Array<{ name: string }>).map((op) => op.name));
      after = body.next_after as string | null;
      if (after !== null) keys.push(after);
    } while (after !== null);
    expect(pages).to.deep.equal([['export-3', 'export-2'], ['export-1']]);
    // The key is the page's last operation's: its creation time and id.
    const second = (await service.http('GET', `/v1/operations/export-2`, undefined, 'agent')).body as { kernel: { created_at: number; operation_id: string } };
    expect(keys).to.deep.equal([`${second.kernel.created_at}.${second.kernel.operation_id}`]);
    const oldest = (await service.http('GET', `/v1/operations/export-1`, undefined, 'agent')).body as { kernel: { created_at: number; operation_id: string } };
    expect((await service.http('GET', `/v1/operations?after=${oldest.kernel.created_at}.${oldest.kernel.operation_id}`, undefined, 'agent')).body).to.deep.equal({ operations: [], next_after: null });
    // A key past every operation (the largest time a key may hold) lists from the newest; a time one past it is refused.
    const past = (await service.http('GET', `/v1/operations?after=${MAX_TIMESTAMP_MS}.${'f'.repeat(64)}`, undefined, 'agent')).body as { operations: Array<{ name: string }> };
    expect(past.operations.map((op) => op.name)).to.deep.equal(['export-3', 'export-2', 'export-1']);
    const hex = '0'.repeat(64);
    for (const bad of [`${MAX_TIMESTAMP_MS + 1}.${hex}`, `0.${hex}`, `-1.${hex}`, `1.${hex}0`, `1.${'A'.repeat(64)}`, `1${hex}`, '3', 'x', `${'9'.repeat(17)}.${hex}`]) {
      const refused = await service.http('GET', `/v1/operations?after=${bad}`, undefined, 'agent');
      expect(refused.status, bad).to.equal(400);
      expect(refused.body.code, bad).to.equal('target_invalid');
      expect(String(refused.body.message), bad).to.include('next_after');
    }
    // The listing no longer skips by count; asked to, it says what it reads instead.
    const byOffset = await service.http('GET', '/v1/operations?offset=2', undefined, 'agent');
    expect(byOffset.status).to.equal(400);
    expect(byOffset.body.code).to.equal('target_invalid');
    expect(String(byOffset.body.message)).to.include('it reads limit, after');

    // Pages of one: three answers, each operation written once, newest first, then the incidents.
    const out = new PassThrough();
    let text = '';
    out.on('data', (chunk: Buffer) => (text += chunk.toString('utf8')));
    expect(await exportCommand(connect(service.dir), out, 1)).to.equal(0);
    const records = await parseLines(text);
    expect(records.filter((r) => r.record === 'operation').map((r) => r.name)).to.deep.equal(['export-3', 'export-2', 'export-1']);
    expect(records.filter((r) => r.record === 'incident').length).to.be.greaterThan(0);
  });

  it('writes every operation once, and none created after it began, when another is created between its pages', async () => {
    const real = connect(service.dir);
    let pagesRead = 0;
    const client = {
      get: async (...args: Parameters<typeof real.get>) => {
        const answer = await real.get(...args);
        // After the first page: one more operation, at the front. By offset it shifted every later page by one, and the first page's last came again.
        if (args[0].startsWith('/v1/operations') && ++pagesRead === 1) {
          const created = await service.http('POST', '/v1/invoke', { tool: 'review-notes/append', arguments: { note: 'meanwhile' }, request_id: 'export-4' }, 'agent');
          expect(created.status).to.equal(200);
        }
        return answer;
      },
    } as unknown as typeof real;
    const out = new PassThrough();
    let text = '';
    out.on('data', (chunk: Buffer) => (text += chunk.toString('utf8')));
    expect(await exportCommand(client, out, 1)).to.equal(0);
    const names = (await parseLines(text)).filter((r) => r.record === 'operation').map((r) => r.name);
    expect(pagesRead, 'one page an operation, none read twice').to.equal(3);
    expect(names).to.deep.equal(['export-3', 'export-2', 'export-1']);
    // The next export starts from the newest, and has it.
    expect(((await service.http('GET', '/v1/operations?limit=1', undefined, 'agent')).body as { operations: Array<{ name: string }> }).operations[0]!.name).to.equal('export-4');
  });

  it('stops quietly with 141 when its reader closes the pipe first (custody export | head)', async () => {
    const child = spawn(process.execPath, [CLI, '--state', service.dir, 'export'], { stdio: ['ignore', 'pipe', 'pipe'] });
    // The reader is gone before the first line: every write the export makes meets a closed pipe (EPIPE).
    child.stdout.destroy();
    let stderr = '';
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString('utf8')));
    const code = await new Promise<number | null>((resolve) => child.on('exit', (status) => resolve(status)));
    expect(stderr, 'nothing said: the reader chose to stop').to.equal('');
    expect(code).to.equal(CLI_EXIT.outputClosed);
    expect(code, '128 + SIGPIPE, as README says').to.equal(141);
  });
});

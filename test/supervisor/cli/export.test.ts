// custody export: operations and incidents as NDJSON, one object per line,
// read back line by line with ndjson's own parser and held against the API.
import { expect } from 'chai';
import ndjson from 'ndjson';
import { PassThrough, Readable } from 'node:stream';
import { connect } from '../../../supervisor/cli/client.js';
import { exportCommand } from '../../../supervisor/cli/commands/export.js';
import { until } from '../../helpers/eventually.js';
import { type TestService, startService } from '../../helpers/service.js';

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
    expect(api.body.next_offset, 'one page held them all').to.equal(null);
  });

  it('pages the listing: each answer says where the next page starts, and the export reads every page, writing each operation once', async () => {
    expect((await service.cli(['invoke', 'review-notes/append', '--arg', 'note=third', '--request-id', 'export-3'])).code).to.equal(0);
    const all = (await service.http('GET', '/v1/operations', undefined, 'agent')).body as { operations: Array<{ name: string }>; next_offset: number | null };
    expect(all.operations.map((op) => op.name)).to.deep.equal(['export-3', 'export-2', 'export-1']);
    const pages: string[][] = [];
    for (let offset: number | null = 0; offset !== null; ) {
      const { body } = await service.http('GET', `/v1/operations?limit=2&offset=${offset}`, undefined, 'agent');
      pages.push((body.operations as Array<{ name: string }>).map((op) => op.name));
      offset = body.next_offset as number | null;
    }
    expect(pages).to.deep.equal([['export-3', 'export-2'], ['export-1']]);
    expect((await service.http('GET', '/v1/operations?offset=3', undefined, 'agent')).body).to.deep.equal({ operations: [], next_offset: null });
    // At most 15 digits: the largest is taken (nothing that far back), one digit more is refused.
    expect((await service.http('GET', `/v1/operations?offset=${'9'.repeat(15)}`, undefined, 'agent')).body).to.deep.equal({ operations: [], next_offset: null });
    for (const bad of ['-1', '1.5', 'x', '1'.repeat(16)]) {
      const refused = await service.http('GET', `/v1/operations?offset=${bad}`, undefined, 'agent');
      expect(refused.status, bad).to.equal(400);
      expect(String(refused.body.message)).to.include('offset');
    }

    // Pages of one: three answers, each operation written once, newest first, then the incidents.
    const out = new PassThrough();
    let text = '';
    out.on('data', (chunk: Buffer) => (text += chunk.toString('utf8')));
    expect(await exportCommand(connect(service.dir), out, 1)).to.equal(0);
    const records = await parseLines(text);
    expect(records.filter((r) => r.record === 'operation').map((r) => r.name)).to.deep.equal(['export-3', 'export-2', 'export-1']);
    expect(records.filter((r) => r.record === 'incident').length).to.be.greaterThan(0);
  });

  it('writes once an operation a page boundary shows twice because another was created between the pages', async () => {
    const real = connect(service.dir);
    let pagesRead = 0;
    const client = {
      get: async (...args: Parameters<typeof real.get>) => {
        const answer = await real.get(...args);
        // After the first page: one more operation, at the front, shifts every later page by one.
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
    expect(pagesRead, 'the first page was read again, shifted').to.equal(4);
    expect(names).to.deep.equal(['export-3', 'export-2', 'export-1']);
  });
});

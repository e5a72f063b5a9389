// A page of ops.list, recover or grant.list stops at what one frame carries,
// and the kernel reads its rows a few hundred at a time up to there
// (kernel-proc/decisions/queries.ts, fittingViews): it used to read all of
// `limit` rows (up to 10,001, each with its report) to send the few hundred
// views that fit. Against a reference that reads them all and cuts, for any
// listing, limit, view sizes and read size: the same views and the same
// next_after, and no more reads than the page's views need, the first of
// `readRows` rows and the next sized to the frame's room (`readRows` at
// least), each one row more.
import { expect } from 'chai';
import fc from 'fast-check';
import { LIST_FRAME_ROOM_BYTES, PAGE_READ_ROWS, fittingViews } from '../../kernel-proc/decisions/queries.js';

const MAX_FRAME = 4096;
const quiet = { maxFrameBytes: MAX_FRAME, log: { warn: () => undefined } } as unknown as Parameters<typeof fittingViews>[0];

interface Row {
  readonly key: number;
  readonly size: number;
}
/** A view naming its row, its JSON text about `size` bytes long. */
const viewOf = (row: Row) => `${row.key}:${'x'.repeat(Math.max(0, row.size - 6))}`;

/** The page as the kernel cut it before: every row up to limit + 1 read, then views until the frame is full. */
function reference(rows: readonly Row[], after: number | null, limit: number): { views: string[]; next_after: number | null } {
  const read = rows.filter((row) => after === null || row.key > after).slice(0, limit + 1);
  const views: string[] = [];
  let bytes = LIST_FRAME_ROOM_BYTES;
  for (const row of read.slice(0, limit)) {
    const view = viewOf(row);
    bytes += Buffer.byteLength(JSON.stringify(view)) + 1;
    if (bytes > MAX_FRAME) break;
    views.push(view);
  }
  if (views.length === 0 && read.length > 0) views.push(viewOf(read[0]!));
  return { views, next_after: views.length < read.length ? read[views.length - 1]!.key : null };
}

const listing = fc.record({
  sizes: fc.array(fc.oneof(fc.integer({ min: 2, max: 400 }), fc.integer({ min: 2, max: MAX_FRAME + 100 })), { maxLength: 60 }),
  limit: fc.integer({ min: 1, max: 70 }),
  readRows: fc.integer({ min: 1, max: 8 }),
  start: fc.option(fc.integer({ min: 0, max: 60 }), { nil: null }),
});

describe('kernel-proc: a page reads its rows only up to a full frame', () => {
  it('answers what reading every row would, in no more reads than its views need', () => {
    fc.assert(
      fc.property(listing, ({ sizes, limit, readRows, start }) => {
        const rows: Row[] = sizes.map((size, key) => ({ key, size }));
        let reads = 0;
        const read = (after: number | null, n: number) => {
          const listed = rows.filter((row) => (start === null || row.key > start) && after !== null && row.key <= after).length;
          expect(n, 'a read asks for readRows at least (or what the limit leaves), and one more').to.be.at.least(Math.min(readRows, limit - listed) + 1);
          reads++;
          return rows.filter((row) => after === null || row.key > after).slice(0, n);
        };
        const page = fittingViews(quiet, read, start, limit, viewOf, (row) => row.key, (row) => `row ${row.key}`, readRows);
        expect(page).to.deep.equal(reference(rows, start, limit));
        // Reads of readRows or more until the frame or the limit is full, and one that finds the end or the row past the frame.
        expect(reads).to.be.at.most(Math.floor(page.views.length / readRows) + 1);
      }),
      { numRuns: 2000 },
    );
  });

  it('reads the rows one frame holds, in two reads, for a page of 10,000 whose frame holds some hundreds', () => {
    const wide = { maxFrameBytes: 300_000, log: { warn: () => undefined } } as unknown as Parameters<typeof fittingViews>[0];
    const rows: Row[] = Array.from({ length: 20_000 }, (_, key) => ({ key, size: 300 + (key % 7) }));
    const asked: number[] = [];
    const read = (after: number | null, n: number) => {
      asked.push(n);
      const from = after === null ? 0 : after + 1;
      return rows.slice(from, from + n);
    };
    const page = fittingViews(wide, read, null, 10_000, viewOf, (row) => row.key, (row) => `row ${row.key}`);
    expect(page.views.length).to.be.within(950, 1000);
    expect(page.next_after).to.equal(page.views.length - 1);
    // 256 first, then what the frame's room holds at the mean size so far: not 10,001, and not one read per 256.
    expect(PAGE_READ_ROWS, 'the first read the figures in PERFORMANCE.md were measured with').to.equal(256);
    expect(asked[0]).to.equal(257);
    expect(asked).to.have.length(2);
    expect(asked.reduce((a, b) => a + b, 0)).to.be.below(page.views.length + 50);
  });

  it('reads a few hundred rows for a page of 10,000 whose frame holds a few', () => {
    const rows: Row[] = Array.from({ length: 20_000 }, (_, key) => ({ key, size: 1000 }));
    let rowsRead = 0;
    const read = (after: number | null, n: number) => {
      const from = after === null ? 0 : after + 1;
      rowsRead += Math.min(n, rows.length - from);
      return rows.slice(from, from + n);
    };
    const page = fittingViews(quiet, read, null, 10_000, viewOf, (row) => row.key, (row) => `row ${row.key}`);
    expect(page.views).to.have.length(3);
    expect(page.next_after).to.equal(2);
    // 10,001 before: every row up to the limit.
    expect(rowsRead).to.be.at.most(257);
  });
});

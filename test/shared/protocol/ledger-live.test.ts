// ledger.live's page bound (docs/PROTOCOL.md, archival): 500 entries a page
// at most, refused one past, and a full page of the longest entries fits a
// frame at the smallest max_frame_bytes a configuration may set.
import { expect } from 'chai';
import { LEDGER_LIVE_PAGE_MAX } from '../../../shared/protocol/executor-messages.js';
import { MESSAGES } from '../../../shared/protocol/messages.js';
import { boundsSchema } from '../../../supervisor/config/schema.js';

describe('protocol: ledger.live pages', () => {
  const spec = MESSAGES['ledger.live'];
  const entry = (n: number) => ({ operation_id: n.toString(16).padStart(64, 'f'), waiting: 'window_open' as const });

  it('asks for at most LEDGER_LIVE_PAGE_MAX entries and answers as many, refusing one more either way', () => {
    expect(LEDGER_LIVE_PAGE_MAX).to.equal(500);
    expect(spec.request.safeParse({ after: 0, limit: LEDGER_LIVE_PAGE_MAX }).success).to.equal(true);
    expect(spec.request.safeParse({ after: 0, limit: LEDGER_LIVE_PAGE_MAX + 1 }).success).to.equal(false);
    expect(spec.request.safeParse({ after: 0, limit: 0 }).success).to.equal(false);
    const full = Array.from({ length: LEDGER_LIVE_PAGE_MAX }, (_, n) => entry(n));
    expect(spec.result.safeParse({ claims: full, next: 9_007_199_254_740_991, live: 50_000 }).success).to.equal(true);
    expect(spec.result.safeParse({ claims: [...full, entry(LEDGER_LIVE_PAGE_MAX)], next: null, live: 50_000 }).success).to.equal(false);
  });

  it('fits a full page of the longest entries in one frame at the smallest frame bound', () => {
    const smallest = 128 * 1024;
    expect(boundsSchema.safeParse({ max_frame_bytes: smallest }).success, 'the smallest frame bound a configuration may set').to.equal(true);
    expect(boundsSchema.safeParse({ max_frame_bytes: smallest - 1 }).success).to.equal(false);
    const body = { claims: Array.from({ length: LEDGER_LIVE_PAGE_MAX }, (_, n) => entry(n)), next: 9_007_199_254_740_991, live: 9_007_199_254_740_991 };
    // The frame's envelope (sid, seq, kind, id, mac) adds a few hundred bytes; half the bound is far from it.
    expect(Buffer.byteLength(JSON.stringify(body))).to.be.below(smallest / 2);
  });
});

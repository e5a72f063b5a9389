// Which grant a reservation draws on (kernel-proc/grants.ts chooseGrant):
// the newest usable grant covering its tool and subject, else the newest
// covering grant's refusal. Since kernel.db version 8 reserve reads only the
// unexpired, unrevoked grants of the patterns that cover the tool, and the
// newest covering grant by one index entry per pattern and subject, where it
// read every grant ever issued (docs/PERFORMANCE.md "Grants on the reserve
// path"). The property below holds those reads to the definition over every
// grant; the kernel's answers are then checked with a pile of expired grants.
import Database from 'better-sqlite3';
import { expect } from 'chai';
import fc from 'fast-check';
import path from 'node:path';
import { byNewest, type GrantRow, GrantsTable } from '../../kernel-proc/store/grants-table.js';
import { KERNEL_MIGRATIONS } from '../../kernel-proc/store/schema.js';
import { coveringPatterns, toolPatternCovers } from '../../shared/protocol/common.js';
import type { GrantKey, GrantView } from '../../shared/protocol/kernel-messages.js';
import type { ResultOf } from '../../shared/protocol/messages.js';
import { applyMigrations } from '../../shared/store/migrations.js';
import { preparedWhile, queryPlan } from '../helpers/query-plans.js';
import { KernelProcess, KernelRoot, grantBody, pinBody, refused, reserveBody, testExecutor, verifyReceipt } from './helpers.js';

const segment = fc.constantFrom('a', 'b', 'c');
const toolArb = fc.array(segment, { minLength: 1, maxLength: 3 }).map((parts) => parts.join('/'));
const patternArb = fc.oneof(toolArb, toolArb.map((tool) => `${tool}/*`), fc.constant('*'));
const subjectArb = fc.constantFrom('*', 'alice', 'bob');

describe('kernel-proc: the grant a reservation draws on', function () {
  this.timeout(60_000);

  it('covers a tool by exactly the patterns coveringPatterns names', () => {
    fc.assert(
      fc.property(patternArb, toolArb, (pattern, tool) => {
        expect(coveringPatterns(tool).includes(pattern), `${pattern} over ${tool}`).to.equal(toolPatternCovers(pattern, tool));
      }),
      { numRuns: 2000 },
    );
  });

  it('reads the live grants and the newest covering one as the definition over every grant says', () => {
    const grant = fc.record({
      tool: patternArb,
      subject: subjectArb,
      // Few distinct times: ties of issued_at are broken by capability_id, as the listing orders them.
      issued_at: fc.integer({ min: 0, max: 5 }),
      expires_in: fc.integer({ min: -3, max: 3 }),
      revoked: fc.boolean(),
    });
    fc.assert(
      fc.property(fc.array(grant, { maxLength: 25 }), toolArb, fc.constantFrom('alice', 'bob', '*'), fc.integer({ min: 0, max: 8 }), (grants, tool, subject, now) => {
        const db = new Database(':memory:');
        try {
          applyMigrations(db, 'grants', KERNEL_MIGRATIONS, { provisioning: true });
          const table = new GrantsTable(db);
          grants.forEach((g, i) => {
            const id = `cap-${String((i * 7919) % 101).padStart(3, '0')}-${i}`;
            table.insert({ capability_id: id, tool: g.tool, subject: g.subject, max_invocations: 1, max_cost_units: null, not_before: 0, expires_at: g.issued_at + 4 + g.expires_in, issued_at: g.issued_at, capability: '{}', capability_digest: '0'.repeat(64) });
            if (g.revoked) table.revoke(id, g.issued_at + 1);
          });
          const every = db.prepare('SELECT * FROM grants ORDER BY issued_at DESC, capability_id').all() as GrantRow[];
          const covering = every.filter((row) => toolPatternCovers(row.tool, tool) && (row.subject === '*' || row.subject === subject));
          const ids = (rows: readonly GrantRow[]) => rows.map((row) => row.capability_id);
          const patterns = coveringPatterns(tool);
          expect(ids(table.live(patterns, subject, now))).to.deep.equal(ids(covering.filter((row) => row.revoked_at === null && now < row.expires_at)));
          expect(table.newest(patterns, subject)?.capability_id).to.equal(covering[0]?.capability_id);
          expect([...covering].sort(byNewest)).to.deep.equal(covering);
        } finally {
          db.close();
        }
      }),
      { numRuns: 200 },
    );
  });

  it('finds the live grants by a range of grants_live and the newest by one entry of grants_newest, in its order', () => {
    const db = new Database(':memory:');
    try {
      applyMigrations(db, 'grants', KERNEL_MIGRATIONS, { provisioning: true });
      const prepared = preparedWhile(() => new GrantsTable(db));
      const statements = prepared.filter((sql) => /WHERE tool = @tool/.test(sql));
      expect(statements).to.have.length(2);
      const plans = statements.map((sql) => queryPlan(db, sql).join('; '));
      expect(plans).to.deep.equal(['SEARCH grants USING INDEX grants_live (tool=? AND subject=? AND expires_at>?)', 'SEARCH grants USING INDEX grants_newest (tool=? AND subject=?)']);
      // grant.list of the live grants (GET /v1/tools, custody mcp): the unexpired ones, sorted among themselves.
      const livePage = prepared.find((sql) => /WHERE expires_at > @now/.test(sql))!;
      expect(queryPlan(db, livePage)).to.include('SEARCH grants USING INDEX grants_expiry (expires_at>?)');
      expect(queryPlan(db, livePage).filter((step) => /^SCAN grants/.test(step))).to.deep.equal([]);
      // grant.list of every grant (custody grant list): from the last page's key on in grants_by_issue's order, nothing sorted (kernel.db version 9).
      const everyPage = prepared.find((sql) => /FROM grants WHERE issued_at <= @issued_at/.test(sql))!;
      expect(queryPlan(db, everyPage)).to.deep.equal(['SEARCH grants USING INDEX grants_by_issue (issued_at<?)']);
    } finally {
      db.close();
    }
  });

  describe('with thousands of expired grants on the tool', () => {
    const root = new KernelRoot();
    const executor = testExecutor(23);
    let kernel: KernelProcess;
    const PILED = 3000;

    before(async () => {
      kernel = await KernelProcess.start(root, { mode: 'provision' });
      await kernel.request('executor.pin', pinBody(executor, ['pile/*']));
      await kernel.stop();
      // As a service that grants per session leaves them: expired long ago, newest last.
      const db = new Database(path.join(root.dir, 'kernel.db'));
      const insert = db.prepare(`INSERT INTO grants (capability_id, tool, subject, max_invocations, max_cost_units, not_before, expires_at, issued_at, capability, capability_digest)
                                 VALUES (?, 'pile/*', '*', 10, NULL, ?, ?, ?, '{}', ?)`);
      const long = root.now() - 86_400_000;
      db.transaction(() => {
        for (let i = 0; i < PILED; i++) insert.run(`cap-pile-${String(i).padStart(5, '0')}`, long + i, long + i + 60_000, long + i, '0'.repeat(64));
      })();
      db.close();
      kernel = await KernelProcess.start(root);
    });
    after(async () => {
      await kernel.stop();
      root.remove();
    });

    /** Every page of grant.list from the newest, following next_after; `between` runs after each page, with it. */
    const pages = async (live: boolean, limit: number, between?: (page: GrantView[]) => Promise<void>) => {
      const all: GrantView[][] = [];
      let after: GrantKey | null = null;
      do {
        const page: ResultOf<'grant.list'> = await kernel.request('grant.list', { live, limit, after });
        all.push(page.grants);
        after = page.next_after;
        if (after !== null) expect(after.capability_id, 'a page ends at its last grant').to.equal(page.grants.at(-1)!.capability_id);
        await between?.(page.grants);
      } while (after !== null);
      return all;
    };
    const grantOf = async (capabilityId: string) => {
      const found = (await pages(false, 10_000)).flat().find((grant) => grant.capability_id === capabilityId);
      if (!found) throw new Error(`no grant ${capabilityId}`);
      return found;
    };

    it('refuses with the newest expired grant when none is live, draws on a live one once granted, and refuses with it once revoked', async () => {
      const newestExpired = `cap-pile-${String(PILED - 1).padStart(5, '0')}`;
      const expired = await kernel.request('reserve', reserveBody('pile-1', { tool: 'pile/x' }));
      expect(expired).to.include({ verdict: 'deny', reason: 'capability_expired' });
      expect(verifyReceipt(expired.receipt!, root.publicKey).capability_id, 'the newest of the pile').to.equal(newestExpired);

      const live = await kernel.request('grant.add', grantBody('pile/*'));
      const allowed = await kernel.request('reserve', reserveBody('pile-2', { tool: 'pile/x' }));
      expect(allowed.verdict).to.equal('allow');
      expect(verifyReceipt(allowed.receipt!, root.publicKey).capability_id).to.equal(live.capability_id);

      await kernel.request('grant.revoke', { capability_id: live.capability_id });
      const revoked = await kernel.request('reserve', reserveBody('pile-3', { tool: 'pile/x' }));
      expect(revoked, 'the newest covering grant is now the revoked one').to.include({ verdict: 'deny', reason: 'capability_revoked' });
      expect(verifyReceipt(revoked.receipt!, root.publicKey).capability_id).to.equal(live.capability_id);
      expect(root.read<{ n: number }>('SELECT count(*) AS n FROM grants WHERE expires_at < ?', root.now())[0]!.n).to.equal(PILED);
    });

    it('lists the live grants without the pile, and every grant a page at a time', async () => {
      const live = await kernel.request('grant.add', grantBody('pile/*'));
      const listed = await kernel.request('grant.list', { live: true, limit: 10_000, after: null });
      // This one and the grant the kernel was provisioned with; none of the pile, nor the one revoked above.
      expect(listed.grants.map((grant) => grant.capability_id)).to.deep.equal([live.capability_id, root.read<{ id: string }>("SELECT capability_id AS id FROM grants WHERE tool = 'review-notes/append'")[0]!.id]);
      expect(listed.grants[0]).to.deep.equal(await grantOf(live.capability_id));
      expect(listed.next_after).to.equal(null);
      const paged = await pages(false, 1000);
      const seen = paged.flat().map((grant) => grant.capability_id);
      // limit is bounded like ops.list's: 10,000 taken (above), one more refused.
      expect((await refused(kernel.request('grant.list', { live: false, limit: 10_001, after: null }))).code).to.equal('schema_violation');
      // The pile, the provisioned grant, the grant revoked above and this one.
      expect(paged.map((page) => page.length)).to.deep.equal([1000, 1000, 1000, 3]);
      expect(new Set(seen).size).to.equal(PILED + 3);
      expect(seen[0], 'newest first').to.equal(live.capability_id);
      expect(seen.at(-1)).to.equal('cap-pile-00000');
    });

    it('lists every live grant once while grants already listed are revoked and new ones added between pages', async () => {
      const added: string[] = [];
      for (let i = 0; i < 20; i++) added.push((await kernel.request('grant.add', grantBody('pile/*'))).capability_id);
      const before = (await pages(true, 10_000)).flat().map((grant) => grant.capability_id);
      expect(before).to.include.members(added);
      // After each page, revoke a grant that page listed (it leaves the live list) and add one: by offset, the next page began one later and skipped a live grant.
      const revoked = new Set<string>();
      const late: string[] = [];
      const paged = await pages(true, 4, async (page) => {
        const leaving = page.find((grant) => added.includes(grant.capability_id) && !revoked.has(grant.capability_id));
        if (leaving) {
          await kernel.request('grant.revoke', { capability_id: leaving.capability_id });
          revoked.add(leaving.capability_id);
        }
        late.push((await kernel.request('grant.add', grantBody('pile/*'))).capability_id);
      });
      expect(revoked.size, 'grants that left between pages').to.be.greaterThan(3);
      const listed = paged.flat().map((grant) => grant.capability_id);
      expect(listed.filter((id) => !late.includes(id)), 'each grant live throughout, once, in order').to.deep.equal(before);
      expect(new Set(listed).size).to.equal(listed.length);
      const after = (await pages(true, 10_000)).flat().map((grant) => grant.capability_id);
      expect(after.filter((id) => !late.includes(id))).to.deep.equal(before.filter((id) => !revoked.has(id)));
      expect(after).to.include.members(late);
    });
  });
});

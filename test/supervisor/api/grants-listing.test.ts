// GET /v1/grants pages like GET /v1/operations (README "Control API"): newest
// first, `limit` at a time, each page after the previous answer's
// next_after, and `live=true` for the grants neither expired nor revoked. A
// service that grants per session piles up grants; one answer held them all.
// `custody grant list` reads every page.
import Database from 'better-sqlite3';
import { expect } from 'chai';
import { MAX_TIMESTAMP_MS } from '../../../shared/protocol/common.js';
import path from 'node:path';
import { connect } from '../../../supervisor/cli/client.js';
import { grantListCommand } from '../../../supervisor/cli/commands/admin.js';
import type { Output } from '../../../supervisor/cli/output.js';
import { type TestService, startService } from '../../helpers/service.js';

interface Listed {
  grants: Array<{ capability_id: string; revoked_at: number | null }>;
  next_after: string | null;
}

describe('GET /v1/grants, a page at a time', function () {
  this.timeout(60_000);
  let service: TestService;
  const added: string[] = [];

  before(async () => {
    service = await startService();
    for (let i = 0; i < 5; i++) {
      const grant = await service.http('POST', '/v1/grants', { tool: 'review-notes/*', max_invocations: 1 + i, ttl_ms: 600_000 });
      expect(grant.status).to.equal(201);
      added.unshift(String(grant.body.capability_id));
    }
    expect((await service.http('DELETE', `/v1/grants/${added[1]}`)).status).to.equal(200);
  });
  after(async () => {
    await service.stop();
    service.cleanup();
  });

  const list = async (query: string) => {
    const answer = await service.http('GET', `/v1/grants${query}`);
    expect(answer.status, JSON.stringify(answer.body)).to.equal(200);
    return answer.body as unknown as Listed;
  };
  const ids = (grants: Listed['grants']) => grants.map((grant) => grant.capability_id);

  it('lists every grant newest first, and pages through them by next_after', async () => {
    const whole = await list('');
    expect(whole.next_after).to.equal(null);
    // The five added, newest first, then the grant the service was provisioned with.
    expect(ids(whole.grants).slice(0, 5)).to.deep.equal(added);
    expect(whole.grants).to.have.length(6);
    const pages: string[][] = [];
    let after: string | null = null;
    do {
      const page: Listed = await list(`?limit=2${after === null ? '' : `&after=${encodeURIComponent(after)}`}`);
      pages.push(ids(page.grants));
      if (page.next_after !== null) expect(page.next_after, 'the key of the last grant listed').to.match(new RegExp(`^\\d+\\.${page.grants.at(-1)!.capability_id}$`));
      after = page.next_after;
    } while (after !== null);
    expect(pages.map((page) => page.length)).to.deep.equal([2, 2, 2]);
    expect(pages.flat()).to.deep.equal(ids(whole.grants));
  });

  it('lists only the live grants with live=true', async () => {
    const live = await list('?live=true');
    expect(ids(live.grants)).to.not.include(added[1]);
    expect(ids(live.grants).slice(0, 4)).to.deep.equal(added.filter((id) => id !== added[1]));
    expect(live.grants.every((grant) => grant.revoked_at === null)).to.equal(true);
  });

  it('refuses a key, a live value or a parameter it does not read, naming what it takes', async () => {
    for (const bad of ['after=x', 'after=0.cap', `after=${'9'.repeat(17)}.cap`, 'after=1.-cap', 'live=yes', 'offset=1']) {
      const answer = await service.http('GET', `/v1/grants?${bad}`);
      expect(answer.status, bad).to.equal(400);
      expect(answer.body.code, bad).to.equal('target_invalid');
    }
    const past = await service.http('GET', `/v1/grants?after=${Number.MAX_SAFE_INTEGER + 1}.cap`);
    expect(past.status).to.equal(400);
    expect(String(past.body.message)).to.include('<issued_at>.<capability_id>');
    // The largest time a key holds is taken (every grant comes after it); one past it is refused.
    const atBound = await service.http('GET', `/v1/grants?after=${MAX_TIMESTAMP_MS}.cap`);
    expect(atBound.status).to.equal(200);
    expect((atBound.body.grants as unknown[]).length).to.be.at.least(4);
    const onePast = await service.http('GET', `/v1/grants?after=${MAX_TIMESTAMP_MS + 1}.cap`);
    expect(onePast.status).to.equal(400);
    expect(onePast.body.code).to.equal('target_invalid');
  });

  it('custody grant list reads every page, and --live the live ones', async () => {
    const printed: unknown[] = [];
    const out: Output = { json: true, result: (document) => printed.push(document), progress: (_label, work) => work };
    expect(await grantListCommand(connect(service.dir), out, false, 2)).to.equal(0);
    expect(await grantListCommand(connect(service.dir), out, true, 2)).to.equal(0);
    const [all, live] = printed as Array<{ grants: Listed['grants'] }>;
    expect(ids(all!.grants)).to.deep.equal(ids((await list('')).grants));
    expect(ids(live!.grants)).to.deep.equal(ids((await list('?live=true')).grants));
    const cli = await service.cli(['grant', 'list', '--live']);
    expect(cli.code).to.equal(0);
    expect(cli.stdout).to.not.include(added[1]);
    expect(cli.stdout).to.include(added[0]);
  });

  it('answers at most 10,000 grants a page (a larger limit is taken as 10,000), 1,000 by default, gathered from the kernel\'s frames', async () => {
    await service.stop();
    // A service that granted per session: 10,001 more grants, written as its kernel would keep them.
    const db = new Database(path.join(service.dir, 'kernel', 'kernel.db'));
    const insert = db.prepare(`INSERT INTO grants (capability_id, tool, subject, max_invocations, max_cost_units, not_before, expires_at, issued_at, capability, capability_digest)
                               VALUES (?, 'pile/*', '*', 1, NULL, 1, 2, ?, '{}', ?)`);
    db.transaction(() => {
      for (let i = 0; i < 10_001; i++) insert.run(`cap-pile-${String(i).padStart(5, '0')}`, 1 + i, '0'.repeat(64));
    })();
    db.close();
    service = await service.restart();
    const atBound = await list('?limit=10000');
    expect(atBound.grants).to.have.length(10_000);
    expect(atBound.next_after, 'more follow').to.not.equal(null);
    const pastBound = await list('?limit=10001');
    expect(pastBound.grants).to.have.length(10_000);
    expect(ids(pastBound.grants)).to.deep.equal(ids(atBound.grants));
    expect((await list('')).grants).to.have.length(1000);
    const rest = await list(`?limit=10000&after=${encodeURIComponent(atBound.next_after!)}`);
    expect(rest.next_after).to.equal(null);
    // The five added, the provisioned grant and the pile, each once.
    expect(new Set([...ids(atBound.grants), ...ids(rest.grants)]).size).to.equal(10_001 + 6);
  });
});

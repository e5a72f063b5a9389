// The `limit` of each listing (LISTING_LIMITS, supervisor/api/answers.ts):
// absent or 0 lists the default, a limit is taken up to the most one answer
// holds, and one past that is cut to it; the API description says the same
// numbers. GET /v1/grants is also driven at 10,000 and 10,001 over a live
// service (grants-listing.test.ts); 100,001 operations are too many to make
// for a test, so GET /v1/operations's bound is held here.
import { expect } from 'chai';
import { LISTING_LIMITS } from '../../../supervisor/api/answers.js';
import { limitOf } from '../../../supervisor/api/handlers.js';
import { openApiDocument } from '../../../supervisor/api/openapi.js';

const query = (text: string) => new URLSearchParams(text);

describe('supervisor: the limit of each listing', () => {
  it('holds the documented numbers: operations 200 by default and 100,000 at most, grants 1,000 and 10,000, incidents 50 and 1,000', () => {
    expect(LISTING_LIMITS).to.deep.equal({
      operations: { fallback: 200, most: 100_000 },
      grants: { fallback: 1000, most: 10_000 },
      incidents: { fallback: 50, most: 1000 },
    });
  });

  for (const [listing, { fallback, most }] of Object.entries(LISTING_LIMITS)) {
    it(`takes ${listing}' limit at 1 and at ${most}, cuts ${most + 1} to ${most}, and lists ${fallback} without one or with 0`, () => {
      const limits = LISTING_LIMITS[listing as keyof typeof LISTING_LIMITS];
      expect(limitOf(query('limit=1'), limits)).to.equal(1);
      expect(limitOf(query(`limit=${most}`), limits)).to.equal(most);
      expect(limitOf(query(`limit=${most + 1}`), limits)).to.equal(most);
      expect(limitOf(query(''), limits)).to.equal(fallback);
      expect(limitOf(query('limit=0'), limits)).to.equal(fallback);
    });
  }

  it('is what the API description says of each route', () => {
    const paths = (openApiDocument() as { paths: Record<string, { get: { parameters?: Array<{ name: string; schema: { maximum?: number }; description?: string }> } }> }).paths;
    for (const [listing, route] of [['operations', '/v1/operations'], ['grants', '/v1/grants'], ['incidents', '/v1/incidents']] as const) {
      const parameter = paths[route]!.get.parameters!.find((p) => p.name === 'limit')!;
      expect(parameter.schema.maximum, route).to.equal(LISTING_LIMITS[listing].most);
      expect(parameter.description, route).to.include(`default ${LISTING_LIMITS[listing].fallback}`);
    }
  });
});

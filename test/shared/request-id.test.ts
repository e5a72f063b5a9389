// The one request-id generator (shared/request-id.ts), used by the CLI, the
// client library and the API alike.
import { expect } from 'chai';
import { checkOperationName } from '../../shared/protocol/names.js';
import { newRequestId } from '../../shared/request-id.js';
import { newRequestId as clientRequestId } from '../../supervisor/client/index.js';

describe('newRequestId', () => {
  it('names a request req-<time base36>-<12 hex>, a name every endpoint accepts', () => {
    const id = newRequestId();
    expect(id).to.match(/^req-[0-9a-z]+-[0-9a-f]{12}$/);
    expect(checkOperationName(id, 'request id')).to.equal(id);
  });

  it('never repeats within the same millisecond', () => {
    const ids = new Set(Array.from({ length: 2000 }, () => newRequestId()));
    expect(ids.size).to.equal(2000);
  });

  it('is the generator the client library exports', () => {
    expect(clientRequestId).to.equal(newRequestId);
  });
});

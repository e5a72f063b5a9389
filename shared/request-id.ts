// The one request-id generator, for every caller that names a request before
// sending it (the CLI, the client library, the API when a body leaves it out):
// `req-<time base36>-<12 hex>`, unique without coordination and sortable by
// the time it was chosen.
import { randomHex } from './random-hex.js';

export function newRequestId(): string {
  return `req-${Date.now().toString(36)}-${randomHex(6)}`;
}

// The digests that bind an operation together, computed the same way by the
// kernel (which signs them), the supervisor (which records the expectation)
// and the executor (which checks the arguments it is given).
import { canonicalDigest } from '../canonical/digest.js';
import { type JsonObject } from './common.js';

/** SHA-256 of the RFC 8785 bytes of a tool's arguments. */
export function parametersDigest(args: JsonObject): string {
  return canonicalDigest(args);
}

/** An operation's id follows from its request id alone, so any process can find it again after a crash. */
export function operationIdFor(requestId: string): string {
  return canonicalDigest({ custody: 'custody.operation.v1', request_id: requestId });
}

export interface RequestBinding {
  readonly request_id: string;
  readonly subject: string;
  readonly tool: string;
  readonly parameters_digest: string;
  readonly capability_id: string | null;
  readonly cost_units: number;
}

/** What "the same request bytes" means for idempotency: the digest of everything the request asks for. */
export function requestBindingHash(binding: RequestBinding): string {
  return canonicalDigest({ custody: 'custody.request.v1', ...binding });
}

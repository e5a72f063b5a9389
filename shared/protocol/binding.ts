// The digests that bind an operation together, computed the same way by the
// kernel (which signs them), the supervisor (which records the expectation)
// and the executor (which checks the arguments it is given).
import { canonicalDigest } from '../canonical/digest.js';
import type { JsonObject } from './common.js';

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

/** A reserve request as the binding sees it: its arguments count by their digest. */
export interface BoundRequest extends Omit<RequestBinding, 'parameters_digest'> {
  readonly arguments: JsonObject;
}

/**
 * The digests of a reserve request, built here only: by the kernel, which
 * stores the binding and refuses other bytes under the same request id, and
 * by the supervisor, which logs the request under the same binding first.
 * Only the bound fields count, whatever else `request` carries.
 */
export function bindRequest(request: BoundRequest): { readonly parameters_digest: string; readonly request_binding_hash: string } {
  const parameters_digest = parametersDigest(request.arguments);
  const { request_id, subject, tool, capability_id, cost_units } = request;
  return { parameters_digest, request_binding_hash: requestBindingHash({ request_id, subject, tool, parameters_digest, capability_id, cost_units }) };
}

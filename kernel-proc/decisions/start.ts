// start (ARCHITECTURE.md §6.1): the nonce must be this reservation's, unexpired and
// unused, and the arguments must hash to the reserved parameters digest. One
// transaction consumes the nonce, commits the start and signs the dispatch
// authorization for the pinned executor. A refusal of a reservation is
// signed, ends it (`start_denied`) and releases its hold in the same
// transaction.
//
// The order of the checks is the model's (H1, ARCHITECTURE.md §6.5):
//   1. a retried start (same request id, nonce and arguments) is recognised
//      first and gets its retained answer, before its nonce is looked at (the
//      nonce is used by then and would read as reused);
//   2. a terminal operation is never moved: its start answer is the receipt
//      that ended it (an expired one returns the retained expiry receipt, so
//      the hold the sweep released is not released again);
//   3. only then is the nonce checked.
import { signArtifact } from '../../shared/artifacts/artifact.js';
import { canonicalDigest } from '../../shared/canonical/digest.js';
import { CustodyError, type ErrorCode } from '../../shared/errors.js';
import { operationIdFor, parametersDigest } from '../../shared/protocol/binding.js';
import type { RequestOf, ResultOf } from '../../shared/protocol/messages.js';
import type { UnitContext } from '../commit-queue.js';
import type { Kernel } from '../kernel.js';
import { OPERATION_MACHINE } from '../machines.js';
import { servesTool } from '../pins.js';
import type { GrantRow } from '../store/grants-table.js';
import { holdIdFor } from '../store/holds-table.js';
import type { NonceRow } from '../store/nonces-table.js';
import type { PinRow } from '../store/pins-table.js';
import type { OperationRow } from '../store/operations-table.js';
import type { ReceiptRow } from '../store/receipts-table.js';
import { expectedOf } from '../views.js';
import { expireOperation } from './expiry.js';
import { assertHistoryRoom, nextReceiptSlot, recordReceipt } from './receipts.js';

type StartRequest = RequestOf<'start'>;
type StartResult = ResultOf<'start'>;

/** What "the same start request" means: the request id, the nonce presented and the arguments' digest. */
export function startRequestDigest(request: StartRequest, parameters = parametersDigest(request.arguments)): string {
  return canonicalDigest({
    custody: 'custody.start.v1',
    request_id: request.request_id,
    nonce_id: request.nonce_id,
    parameters_digest: parameters,
  });
}

/**
 * `hostBinding`: reserve_start's `request_binding_hash`, the binding the host
 * logged for this request; a reservation bound otherwise is refused rather
 * than started (reserve-start.ts).
 */
export function start(kernel: Kernel, request: StartRequest, context: UnitContext, hostBinding?: string): StartResult {
  const { store } = kernel;
  const operation = store.operations.get(operationIdFor(request.request_id));
  if (!operation) throw new CustodyError('operation_unknown', `no reservation for request id ${request.request_id}; reserve first`);
  // The arguments are canonicalized and hashed once: for the request digest and for the reservation's check.
  const parameters = parametersDigest(request.arguments);
  const requestDigest = startRequestDigest(request, parameters);

  // 1. A retry: the retained authorization or the retained refusal, byte for byte.
  if (operation.start_request_digest === requestDigest) return authorizedReply(operation, operation.authorization);
  const answered = store.receipts.forRequest(operation.operation_id, requestDigest);
  if (answered) return refusalReply(operation, answered);

  // 2. Nothing moves a terminal operation.
  if (OPERATION_MACHINE.isTerminal(operation.state)) return terminalReply(kernel, operation);

  const nonce = store.nonces.forOperation(operation.operation_id);
  const { now } = context;
  if (operation.state === 'reserved' && nonce && nonce.expires_at <= now) {
    // The sweep before each batch has normally expired it already; this keeps an expired nonce from ever
    // committing a start should that sweep have failed.
    expireOperation(kernel, operation, nonce, now);
    context.afterCommit('after_sweep_commit');
    return terminalReply(kernel, store.operations.get(operation.operation_id)!);
  }

  // 3. The nonce and the arguments.
  if (operation.state !== 'reserved') return refuseSecondStart(kernel, operation, nonce, request, requestDigest, context);
  const judged = judgeStart(kernel, operation, nonce, request, parameters, now, hostBinding);
  if ('code' in judged) return refuseReservation(kernel, operation, nonce, judged, requestDigest, context);
  return commitStart(kernel, operation, judged, requestDigest, context);
}

/**
 * A start for a committed operation (dispatch_committed, awaiting_report,
 * unknown) that is not a retry: its nonce is spent, so it is refused, signed,
 * and changes nothing — the hold stays with the dispatched effect.
 */
function refuseSecondStart(
  kernel: Kernel,
  operation: OperationRow,
  nonce: NonceRow | undefined,
  request: StartRequest,
  requestDigest: string,
  context: UnitContext,
): StartResult {
  const { store } = kernel;
  const { now } = context;
  const reason: ErrorCode = nonce && request.nonce_id === nonce.nonce_id ? 'nonce_reused' : 'nonce_unknown';
  assertHistoryRoom(kernel, operation);
  const slot = nextReceiptSlot(kernel, operation.operation_id);
  const hold = store.holds.forOperation(operation.operation_id);
  const receipt = recordReceipt(kernel, operation, slot, { decision: 'start', verdict: 'deny', reason, state: operation.state, hold, requestDigest }, now);
  context.whenCommitted(() => kernel.log.info('start_refused', { operation_id: operation.operation_id, reason, state: operation.state }));
  return refusalReply(operation, receipt);
}

interface StartRefusal {
  readonly code: ErrorCode;
  readonly message: string;
}

/** What a start that may commit was judged with: its live nonce, the executor's pin and the live grant. */
interface StartAdmission {
  readonly nonce: NonceRow;
  readonly pin: PinRow;
  readonly grant: GrantRow;
}

function judgeStart(
  kernel: Kernel,
  operation: OperationRow,
  nonce: NonceRow | undefined,
  request: StartRequest,
  parameters: string,
  now: number,
  hostBinding: string | undefined,
): StartRefusal | StartAdmission {
  if (hostBinding !== undefined && hostBinding !== operation.request_binding_hash) {
    return {
      code: 'invocation_mismatch',
      message: `request ${operation.request_id} was reserved under binding ${operation.request_binding_hash.slice(0, 16)}…, the host logged ${hostBinding.slice(0, 16)}…; it is not started`,
    };
  }
  if (!nonce || request.nonce_id !== nonce.nonce_id) {
    return { code: 'nonce_unknown', message: `nonce ${request.nonce_id.slice(0, 20)} is not the nonce of operation ${operation.request_id}` };
  }
  if (nonce.state !== 'live') return { code: 'nonce_reused', message: `nonce of ${operation.request_id} is ${nonce.state}` };
  if (parameters !== operation.parameters_digest) {
    return {
      code: 'arguments_changed',
      message: `arguments of ${operation.request_id} hash to ${parameters.slice(0, 16)}…, reserved ${operation.parameters_digest.slice(0, 16)}…`,
    };
  }
  const grant = operation.capability_id === null ? undefined : kernel.store.grants.get(operation.capability_id);
  if (!grant) return { code: 'capability_unknown', message: `operation ${operation.request_id} has no grant` };
  if (grant.revoked_at !== null) return { code: 'capability_revoked', message: `grant ${grant.capability_id} was revoked after the reservation` };
  if (now >= grant.expires_at) return { code: 'capability_expired', message: `grant ${grant.capability_id} expired at ${grant.expires_at}` };
  const executorId = request.executor_id ?? operation.executor_id;
  const pin = executorId === null ? undefined : kernel.store.pins.current(executorId);
  if (!pin || !servesTool(pin, operation.tool)) {
    return { code: 'tool_unknown', message: `executor ${executorId ?? '(none)'} ${pin ? 'does not serve' : 'is not pinned for'} ${operation.tool}; start it on an executor whose pin serves the tool` };
  }
  return { nonce, pin, grant };
}

function refuseReservation(
  kernel: Kernel,
  operation: OperationRow,
  nonce: NonceRow | undefined,
  refusal: StartRefusal,
  requestDigest: string,
  context: UnitContext,
): StartResult {
  const { store } = kernel;
  const { now } = context;
  const slot = nextReceiptSlot(kernel, operation.operation_id);
  store.operations.move(operation, 'start_denied', now);
  if (nonce?.state === 'live') store.nonces.close(nonce, 'voided', now);
  // The hold is released only while it is still reserved; the store refuses a second disposal.
  const hold = store.holds.forOperation(operation.operation_id);
  if (hold?.state === 'reserved') store.holds.settle(hold, 'released', 0, now, slot.id);
  const receipt = recordReceipt(
    kernel,
    operation,
    slot,
    {
      decision: 'start',
      verdict: 'deny',
      reason: refusal.code,
      state: 'start_denied',
      hold: store.holds.forOperation(operation.operation_id),
      requestDigest,
    },
    now,
  );
  context.whenCommitted(() => kernel.log.info('start_denied', { operation_id: operation.operation_id, reason: refusal.code, message: refusal.message }));
  context.afterCommit('after_start_commit');
  return refusalReply(operation, receipt);
}

function commitStart(kernel: Kernel, operation: OperationRow, { nonce, pin, grant }: StartAdmission, requestDigest: string, context: UnitContext): StartResult {
  const { store, settings } = kernel;
  const { now, wallNow } = context;
  const expected = expectedOf(operation)!;
  // The window opens now by the clock (wallNow, not the high-water mark: kernel-proc/service.ts #decisionTime) and lasts
  // execution_window_ms, never past the grant's expiry. The grant was judged valid at now >= wallNow, so it opens before that.
  const expiresAt = Math.min(wallNow + settings.execution_window_ms, grant.expires_at);
  const authorization = signArtifact(
    'authorization',
    {
      executor: { id: pin.executor_id, public_key: pin.public_key, key_epoch: pin.key_epoch },
      invocation: expected,
      committed: { nonce_id: nonce.nonce_id, budget_hold_id: holdIdFor(operation.operation_id) },
      not_before: wallNow,
      expires_at: expiresAt,
      issued_at: wallNow,
    },
    kernel.signer,
  );
  store.nonces.close(nonce, 'used', now);
  store.operations.commitDispatch(
    operation,
    {
      executor_id: pin.executor_id,
      start_request_digest: requestDigest,
      authorization: authorization.text,
      authorization_digest: authorization.digest,
      window_not_before: wallNow,
      window_expires_at: expiresAt,
    },
    now,
  );
  context.whenCommitted(() => kernel.log.info('dispatch_committed', { operation_id: operation.operation_id, executor_id: pin.executor_id, key_epoch: pin.key_epoch, reserved_for: operation.executor_id }));
  context.afterCommit('after_start_commit');
  // The invocation does not change at commit, and the authorization is the text just stored: no read back.
  return authorizedReply(operation, authorization.text);
}

/** The allowed start, as first answered: same authorization bytes on every retry, in every later state. */
function authorizedReply(operation: OperationRow, authorization: string | null): StartResult {
  return {
    operation_id: operation.operation_id,
    verdict: 'allow',
    reason: 'ok',
    state: 'dispatch_committed',
    receipt: null,
    authorization,
    expected: expectedOf(operation),
  };
}

function refusalReply(operation: OperationRow, receipt: ReceiptRow): StartResult {
  return {
    operation_id: operation.operation_id,
    verdict: 'deny',
    reason: receipt.reason,
    state: receipt.state,
    receipt: receipt.receipt,
    authorization: null,
    expected: expectedOf(operation),
  };
}

/** A start on a terminal operation: the retained receipt that ended it, nothing new. */
function terminalReply(kernel: Kernel, operation: OperationRow): StartResult {
  const ending = kernel.store.receipts.entering(operation.operation_id, operation.state);
  if (!ending) throw new CustodyError('internal', `terminal operation ${operation.operation_id} has no receipt for ${operation.state}`);
  const reply = refusalReply(operation, ending);
  return ending.verdict === 'deny' ? reply : { ...reply, reason: 'operation_terminal' };
}

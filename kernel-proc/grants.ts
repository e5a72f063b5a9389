// Capabilities: kernel-signed grants, their revocation, and which grant a
// reservation draws on. Budget use is counted on the grant row by the hold
// triggers (store/holds-table.ts, store/schema.ts version 2).
import { randomBytes } from 'node:crypto';
import { decodeArtifact, signArtifact } from '../shared/artifacts/artifact.js';
import { CustodyError, type ErrorCode, toCustodyError } from '../shared/errors.js';
import { MAX_TIMESTAMP_MS, coveringPatterns, toolPatternCovers } from '../shared/protocol/common.js';
import type { RequestOf } from '../shared/protocol/messages.js';
import type { Kernel } from './kernel.js';
import type { GrantRow } from './store/grants-table.js';

export type GrantRequest = RequestOf<'grant.add'>;

export function addGrant(kernel: Kernel, request: GrantRequest, now: number): GrantRow {
  const notBefore = request.not_before ?? now;
  const expiresAt = notBefore + request.ttl_ms;
  if (expiresAt > MAX_TIMESTAMP_MS) {
    throw new CustodyError('bad_request', `grant not_before ${notBefore} + ttl_ms ${request.ttl_ms} passes the largest timestamp`);
  }
  const signed = signArtifact(
    'capability',
    {
      id: `cap-${randomBytes(12).toString('hex')}`,
      tool: request.tool,
      subject: request.subject,
      max_invocations: request.max_invocations,
      max_cost_units: request.max_cost_units,
      not_before: notBefore,
      expires_at: expiresAt,
      issued_at: now,
    },
    kernel.signer,
  );
  const { body, text, digest } = signed;
  kernel.store.grants.insert({
    capability_id: body.id,
    tool: body.tool,
    subject: body.subject,
    max_invocations: body.max_invocations,
    max_cost_units: body.max_cost_units,
    not_before: body.not_before,
    expires_at: body.expires_at,
    issued_at: body.issued_at,
    capability: text,
    capability_digest: digest,
  });
  return kernel.store.grants.get(body.id)!;
}

export function revokeGrant(kernel: Kernel, capabilityId: string, now: number): GrantRow {
  if (!kernel.store.grants.get(capabilityId)) throw new CustodyError('capability_unknown', `no grant ${capabilityId}`);
  kernel.store.grants.revoke(capabilityId, now);
  return kernel.store.grants.get(capabilityId)!;
}

/** Why a grant cannot carry a reservation, or null when it can. */
export interface GrantRefusal {
  readonly reason: ErrorCode;
  readonly message: string;
}

export type GrantChoice =
  | { readonly grant: GrantRow; readonly refusal: null }
  | { readonly grant: GrantRow | null; readonly refusal: GrantRefusal; readonly capabilityId: string | null };

type ReserveRequest = RequestOf<'reserve'>;

/** Checks of one grant against a request, in the order an operator would read them. */
function refusalOf(kernel: Kernel, grant: GrantRow, request: ReserveRequest, now: number): GrantRefusal | null {
  const id = grant.capability_id;
  if (!toolPatternCovers(grant.tool, request.tool)) {
    return { reason: 'tool_not_granted', message: `grant ${id} covers ${grant.tool}, not ${request.tool}` };
  }
  if (grant.subject !== '*' && grant.subject !== request.subject) {
    return { reason: 'subject_not_granted', message: `grant ${id} is for subject ${grant.subject}, not ${request.subject}` };
  }
  if (grant.revoked_at !== null) return { reason: 'capability_revoked', message: `grant ${id} was revoked at ${grant.revoked_at}` };
  if (now < grant.not_before) return { reason: 'capability_not_yet_valid', message: `grant ${id} is valid from ${grant.not_before}, now is ${now}` };
  if (now >= grant.expires_at) return { reason: 'capability_expired', message: `grant ${id} expired at ${grant.expires_at}, now is ${now}` };
  const usage = kernel.store.holds.usage(id);
  const invocations = usage.invocations_used + usage.invocations_held;
  if (invocations + 1 > grant.max_invocations) {
    return {
      reason: 'budget_exhausted',
      message: `grant ${id} allows ${grant.max_invocations} invocations; ${usage.invocations_used} used and ${usage.invocations_held} held`,
    };
  }
  // With no cap, the grant's running totals are still held to 2^53 - 1: past it the counters no longer read back
  // as integers (the grant's views refuse them), and past 2^63 kernel.db refuses every write that moves them.
  const costCap = grant.max_cost_units ?? Number.MAX_SAFE_INTEGER;
  if (usage.cost_units_used + usage.cost_units_held + request.cost_units > costCap) {
    return {
      reason: 'budget_exhausted',
      message: `grant ${id} allows ${grant.max_cost_units ?? `at most ${Number.MAX_SAFE_INTEGER} (2^53 - 1, no cap set)`} cost units; ${usage.cost_units_used} used, ${usage.cost_units_held} held, ${request.cost_units} asked`,
    };
  }
  return null;
}

/**
 * The grant a reservation draws on: the one it names, or else the newest
 * grant covering its tool and subject that can carry it. With none usable,
 * the refusal is the newest candidate's.
 */
export function chooseGrant(kernel: Kernel, request: ReserveRequest, now: number): GrantChoice {
  if (request.capability_id !== null) {
    const grant = kernel.store.grants.get(request.capability_id);
    if (!grant) {
      return { grant: null, capabilityId: request.capability_id, refusal: { reason: 'capability_unknown', message: `no grant ${request.capability_id}` } };
    }
    const refusal = refusalOf(kernel, grant, request, now) ?? verifyCapability(kernel, grant);
    return refusal ? { grant, capabilityId: grant.capability_id, refusal } : { grant, refusal: null };
  }
  // Only an unexpired, unrevoked grant can carry it: those are read by their
  // pattern (kernel.db version 8), not every grant ever issued, which a
  // service granting per session would pile up (docs/PERFORMANCE.md "Grants
  // on the reserve path").
  const patterns = coveringPatterns(request.tool);
  let first: { grant: GrantRow; refusal: GrantRefusal } | null = null;
  for (const grant of kernel.store.grants.live(patterns, request.subject, now)) {
    const refusal = refusalOf(kernel, grant, request, now) ?? verifyCapability(kernel, grant);
    if (!refusal) return { grant, refusal: null };
    first ??= { grant, refusal };
  }
  // None can: the refusal is the newest covering grant's, live or not.
  const newest = kernel.store.grants.newest(patterns, request.subject);
  if (newest && newest.capability_id !== first?.grant.capability_id) {
    // Not among the live ones, so expired or revoked: refusalOf says which.
    first = { grant: newest, refusal: refusalOf(kernel, newest, request, now) ?? { reason: 'internal', message: `grant ${newest.capability_id} is neither live nor refused` } };
  }
  if (first) return { ...first, capabilityId: first.grant.capability_id };
  return {
    grant: null,
    capabilityId: null,
    refusal: { reason: 'capability_unknown', message: `no grant covers tool ${request.tool} for subject ${request.subject}` },
  };
}

interface VerifiedCapability {
  readonly text: string;
  readonly body: { readonly id: string; readonly tool: string; readonly subject: string; readonly max_invocations: number; readonly max_cost_units: number | null; readonly not_before: number; readonly expires_at: number };
  readonly digest: string;
}

/**
 * Capabilities whose signature verified, by capability id, with the exact
 * text that verified. Reserve checks a grant on every call; the Ed25519
 * verification is the costly part and its answer depends only on those
 * bytes and this kernel's key, so a hit needs the same text (compared whole)
 * and the row is still compared with the signed body every time. A miss only
 * costs a verification, so the cache is simply emptied when it reaches
 * VERIFIED_CACHE_ENTRIES (a size, not a behaviour).
 */
const verifiedCapabilities = new WeakMap<Kernel, Map<string, VerifiedCapability>>();
const VERIFIED_CACHE_ENTRIES = 1024;

function verifiedOf(kernel: Kernel, grant: GrantRow): VerifiedCapability {
  let cache = verifiedCapabilities.get(kernel);
  if (!cache) verifiedCapabilities.set(kernel, (cache = new Map<string, VerifiedCapability>()));
  const hit = cache.get(grant.capability_id);
  if (hit && hit.text === grant.capability) return hit;
  // Signed under any of this kernel's key epochs: a grant made before a kernel rotation stays valid until it
  // expires or is revoked; it is not re-issued (docs/SECURITY.md, "Rotating keys").
  const decoded = decodeArtifact('capability', grant.capability, { trustedSigners: kernel.store.kernelEpochs().map((row) => row.public_key) });
  const verified: VerifiedCapability = { text: grant.capability, body: decoded.body, digest: decoded.digest };
  if (cache.size >= VERIFIED_CACHE_ENTRIES) cache.clear();
  cache.set(grant.capability_id, verified);
  return verified;
}

/** A grant is used only if its retained bytes still verify under one of this kernel's keys and match its row. */
function verifyCapability(kernel: Kernel, grant: GrantRow): GrantRefusal | null {
  try {
    const { body, digest } = verifiedOf(kernel, grant);
    const same =
      body.id === grant.capability_id &&
      body.tool === grant.tool &&
      body.subject === grant.subject &&
      body.max_invocations === grant.max_invocations &&
      body.max_cost_units === grant.max_cost_units &&
      body.not_before === grant.not_before &&
      body.expires_at === grant.expires_at &&
      digest === grant.capability_digest;
    if (!same) return { reason: 'capability_invalid', message: `grant ${grant.capability_id}: its row differs from its signed capability` };
    return null;
  } catch (error) {
    return { reason: 'capability_invalid', message: `grant ${grant.capability_id}: ${toCustodyError(error).message}` };
  }
}

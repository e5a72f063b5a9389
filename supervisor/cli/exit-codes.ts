// The CLI's exit codes are a contract (README "Exit codes"): scripts branch on
// them. Each follows from an outcome or from an error's class, never from a
// message.
import { type ErrorClass, classOf, isErrorCode } from '../../shared/errors.js';

export const EXIT_CODES = {
  done: 0,
  error: 1,
  usage: 2,
  refused: 3,
  unknown: 4,
  unreachable: 5,
  replyDropped: 75,
} as const;

const BY_CLASS: Record<ErrorClass, number> = {
  usage: EXIT_CODES.usage,
  refused: EXIT_CODES.refused,
  unknown: EXIT_CODES.unknown,
  unreachable: EXIT_CODES.unreachable,
  not_found: EXIT_CODES.error,
  auth: EXIT_CODES.error,
  protocol: EXIT_CODES.error,
  internal: EXIT_CODES.error,
};

export function exitCodeForError(code: string): number {
  if (code === 'reply_dropped') return EXIT_CODES.replyDropped;
  if (!isErrorCode(code)) return EXIT_CODES.error;
  return BY_CLASS[classOf(code)];
}

/**
 * Kernel outcomes that end an operation with no effect: refused or denied
 * before anything ran, or settled as not applied. (A finalization denial is
 * not among them: its effect may have happened; it is 4, for an operator.)
 */
const REFUSED_OUTCOMES = new Set(['denied', 'start_denied', 'expired', 'released']);

export function exitCodeForOutcome(outcome: { final: boolean; outcome: string | null; phase: string }, goal: 'complete' | 'authorized' | 'reported'): number {
  if (outcome.outcome && REFUSED_OUTCOMES.has(outcome.outcome)) return EXIT_CODES.refused;
  if (outcome.phase === 'refused') return EXIT_CODES.refused;
  if (goal === 'authorized' && ['authorized', 'executing', 'reported', 'settled'].includes(outcome.phase)) return EXIT_CODES.done;
  if (goal === 'reported' && (outcome.phase === 'reported' || outcome.phase === 'settled')) return outcome.outcome === 'completed' || outcome.phase === 'reported' ? EXIT_CODES.done : EXIT_CODES.unknown;
  if (goal === 'complete' && outcome.final && outcome.outcome === 'completed') return EXIT_CODES.done;
  return EXIT_CODES.unknown;
}

// Which of the CLI's exit codes (shared/exit-codes.ts, README "Exit codes")
// a command ends with: each follows from an outcome or from an error's class,
// never from a message.
import { type ErrorClass, classOf, isErrorCode } from '../../shared/errors.js';
import { CLI_EXIT } from '../../shared/exit-codes.js';
import { endedWithoutEffect } from '../operations/outcome.js';

const BY_CLASS: Record<ErrorClass, number> = {
  usage: CLI_EXIT.usage,
  refused: CLI_EXIT.refused,
  unknown: CLI_EXIT.unknown,
  unreachable: CLI_EXIT.unreachable,
  not_found: CLI_EXIT.error,
  auth: CLI_EXIT.error,
  protocol: CLI_EXIT.error,
  internal: CLI_EXIT.error,
};

export function exitCodeForError(code: string): number {
  if (code === 'reply_dropped') return CLI_EXIT.replyDropped;
  if (!isErrorCode(code)) return CLI_EXIT.error;
  return BY_CLASS[classOf(code)];
}

export function exitCodeForOutcome(outcome: { final: boolean; outcome: string | null; phase: string }, goal: 'complete' | 'authorized' | 'reported'): number {
  // Ended with no effect (operations/outcome.ts); a finalization denial is 4, for an operator.
  if (endedWithoutEffect(outcome.outcome)) return CLI_EXIT.refused;
  if (outcome.phase === 'refused') return CLI_EXIT.refused;
  if (goal === 'authorized' && ['authorized', 'executing', 'reported', 'settled'].includes(outcome.phase)) return CLI_EXIT.done;
  if (goal === 'reported' && (outcome.phase === 'reported' || outcome.phase === 'settled')) return outcome.outcome === 'completed' || outcome.phase === 'reported' ? CLI_EXIT.done : CLI_EXIT.unknown;
  if (goal === 'complete' && outcome.final && outcome.outcome === 'completed') return CLI_EXIT.done;
  return CLI_EXIT.unknown;
}

// The built-in adapter `review-notes/append` (ARCHITECTURE.md §6.2): a durable tool
// that appends a reviewer's note to <resources>/review-notes.jsonl. Its
// reconcile finds the note, or fences the operation and answers not_applied,
// which the fence makes true: a later append of that operation refuses.
import path from 'node:path';
import { z } from 'zod';
import type { CustodyAdapter } from './contract.js';
import { NotesJournal } from './journal.js';
import { ExclusiveFileLock } from './journal-lock.js';

export const REVIEW_NOTES_TOOL = 'review-notes/append';
export const REVIEW_NOTES_FILE = 'review-notes.jsonl';

export function noteArgumentSchema(maxBytes: number) {
  return z.strictObject({
    note: z.string().describe(`the note to append, at most ${maxBytes} UTF-8 bytes`).check((ctx) => {
      const bytes = Buffer.byteLength(ctx.value, 'utf8');
      if (bytes > maxBytes) {
        // A too_big issue: the executor answers arguments_too_large.
        ctx.issues.push({
          code: 'too_big',
          origin: 'string',
          maximum: maxBytes,
          inclusive: true,
          input: ctx.value,
          message: `note is ${bytes} UTF-8 bytes; at most ${maxBytes} are allowed (executors[].settings.note_max_bytes)`,
        });
      }
    }),
  });
}

export function reviewNotesAdapter(resources: string, maxBytes: number, warn: (event: string, fields: Record<string, unknown>) => void): CustodyAdapter & { close(): void } {
  const file = path.join(resources, REVIEW_NOTES_FILE);
  const lock = new ExclusiveFileLock(`${file}.lock`);
  const journal = new NotesJournal(file, lock, warn);
  return {
    tool: REVIEW_NOTES_TOOL,
    description: `Append a reviewer's note (at most ${maxBytes} UTF-8 bytes) as one line to the review-notes journal; output: the line appended`,
    contract: 'durable',
    argumentSchema: noteArgumentSchema(maxBytes),
    maxArgumentBytes: maxBytes * 6 + 64,
    execute: ({ operationKey, arguments: args }) => {
      // The schema admitted exactly { note: string } before anything was claimed.
      const appended = journal.append(operationKey, args.note as string);
      if (appended.outcome === 'fenced') {
        return Promise.resolve({ outcome: 'not_applied', reason: `operation ${operationKey} was fenced by reconciliation; the note was not appended` });
      }
      return Promise.resolve({ outcome: 'applied', output: { ...appended.line } });
    },
    reconcile: ({ operationKey }) => {
      const observed = journal.observe(operationKey);
      if (observed.outcome === 'applied') return Promise.resolve({ outcome: 'applied', output: { ...observed.line } });
      return Promise.resolve({ outcome: 'not_applied' });
    },
    close: () => {
      journal.close();
      lock.close();
    },
  };
}

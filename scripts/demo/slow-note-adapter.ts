// A demo tool for `npm run demo`: `demo/slow-note` appends a note like
// review-notes/append, after waiting `delay_ms` — long enough to kill its
// executor in the middle, or to run past its watchdog deadline. Durable: its
// reconcile fences the operation in the journal before answering
// not_applied. It keeps its own journal in $CUSTODY_DEMO_JOURNAL_DIR.
//
// Loaded as an operator loads any tool, by naming this module in
// custody.json (executors[].adapters) — see executor-proc/ADAPTERS.md.
import { mkdirSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { z } from 'zod';
import { reviewNotesAdapter } from '../../executor-proc/adapters/review-notes.js';

const dir = process.env.CUSTODY_DEMO_JOURNAL_DIR;
if (!dir) throw new Error('demo/slow-note needs CUSTODY_DEMO_JOURNAL_DIR, the directory of its journal');
mkdirSync(dir, { recursive: true, mode: 0o700 });
const notes = reviewNotesAdapter(dir, 4096, () => undefined);

export default {
  tool: 'demo/slow-note',
  contract: 'durable',
  // CLI arguments are strings: `--arg delay_ms=8000`.
  argumentSchema: z.strictObject({ note: z.string().max(4096), delay_ms: z.string().regex(/^\d{1,5}$/, 'milliseconds, at most 99999') }),
  async execute(call: { operationKey: string; arguments: { note: string; delay_ms: string } }) {
    await sleep(Number(call.arguments.delay_ms));
    return notes.execute({ operationKey: call.operationKey, arguments: { note: call.arguments.note } } as never);
  },
  reconcile: (call: { operationKey: string }) => notes.reconcile!(call as never),
};

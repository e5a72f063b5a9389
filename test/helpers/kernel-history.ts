// A small history a real kernel wrote, and the answers it gave: an upgrade
// test writes it at the current version, turns the store into an older one,
// lets this build migrate it, and asks every request again — each answer must
// be the one given before, byte for byte (kernel-proc/store/schema.ts).
import { expect } from 'chai';
import { KernelProcess, type KernelRoot, TOOL, type TestExecutor, grantBody, pinBody, reserveBody, signReport } from '../kernel-proc/helpers.js';

export interface RecordedHistory {
  /** `<prefix>-done`, `-failed`, `-started`, `-waiting` (reserved, never started), then `-denied` (no grant serves its tool). */
  readonly names: readonly string[];
  readonly answers: ReadonlyMap<string, string>;
  readonly bodies: Readonly<Record<string, unknown>>;
  /** What the completed operation's report carried. */
  readonly output: unknown;
}

/** Provision a kernel in `root`, write the history, restart it once (a committed start becomes awaiting_report) and read every operation. */
export async function recordHistory(root: KernelRoot, executor: TestExecutor, prefix: string, output: unknown): Promise<RecordedHistory> {
  const [done, failed, started, waiting, denied] = ['done', 'failed', 'started', 'waiting', 'denied'].map((end) => `${prefix}-${end}`) as [string, string, string, string, string];
  const answers = new Map<string, string>();
  const bodies: Record<string, unknown> = {};
  const record = (key: string, answer: unknown) => answers.set(key, JSON.stringify(answer));
  let kernel = await KernelProcess.start(root, { mode: 'provision' });
  try {
    await kernel.request('executor.pin', pinBody(executor));
    await kernel.request('grant.add', grantBody(TOOL));
    for (const id of [done, failed, started, waiting]) record(`reserve ${id}`, await kernel.request('reserve', reserveBody(id)));
    record(`reserve ${denied}`, await kernel.request('reserve', reserveBody(denied, { tool: 'nobody/serves' })));
    for (const id of [done, failed, started]) {
      const nonce = (JSON.parse(answers.get(`reserve ${id}`)!) as { nonce: { id: string } }).nonce.id;
      bodies[`start ${id}`] = { request_id: id, nonce_id: nonce, arguments: reserveBody(id).arguments };
      record(`start ${id}`, await kernel.request('start', bodies[`start ${id}`] as never));
    }
    const authorizationOf = (id: string) => (JSON.parse(answers.get(`start ${id}`)!) as { authorization: string }).authorization;
    bodies[`settle ${done}`] = { authorization: authorizationOf(done), report: signReport(executor, authorizationOf(done), root.publicKey, { output: output as never }) };
    bodies[`settle ${failed}`] = {
      authorization: authorizationOf(failed),
      report: signReport(executor, authorizationOf(failed), root.publicKey, { status: 'failed_before_effect', output: null }),
    };
    for (const id of [done, failed]) record(`settle ${id}`, await kernel.request('settle', bodies[`settle ${id}`] as never));
    await kernel.stop();
    kernel = await KernelProcess.start(root);
    for (const id of [done, failed, started, waiting, denied]) record(`get ${id}`, await kernel.request('operation.get', { operation_id: null, request_id: id }));
  } finally {
    await kernel.stop();
  }
  return { names: [done, failed, started, waiting, denied], answers, bodies, output };
}

/** Ask `kernel` every request of `history` again: each answer is the one recorded, byte for byte. */
export async function expectSameAnswers(kernel: KernelProcess, history: RecordedHistory): Promise<void> {
  const [done, failed, started, waiting, denied] = history.names as [string, string, string, string, string];
  const again = async (key: string, answer: Promise<unknown>) => expect(JSON.stringify(await answer), key).to.equal(history.answers.get(key));
  for (const id of [done, failed, started, waiting]) await again(`reserve ${id}`, kernel.request('reserve', reserveBody(id)));
  await again(`reserve ${denied}`, kernel.request('reserve', reserveBody(denied, { tool: 'nobody/serves' })));
  for (const id of [done, failed, started]) await again(`start ${id}`, kernel.request('start', history.bodies[`start ${id}`] as never));
  for (const id of [done, failed]) await again(`settle ${id}`, kernel.request('settle', history.bodies[`settle ${id}`] as never));
  expect((JSON.parse(history.answers.get(`settle ${done}`)!) as { output: unknown }).output).to.deep.equal(history.output);
  for (const id of history.names) await again(`get ${id}`, kernel.request('operation.get', { operation_id: null, request_id: id }));
}

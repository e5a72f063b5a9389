// `custody invoke --request-id` of a request logged before the call: the
// answer is that request's, and the CLI says so, with when it was first
// asked; nothing runs again (README "Exit codes" and "Invoking").
import { expect } from 'chai';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { type TestService, startService } from '../../helpers/service.js';

describe('custody invoke of a request id already logged', function () {
  this.timeout(60_000);
  let service: TestService;
  const lines = (note: string) =>
    readFileSync(path.join(service.paths.resourcesDir, 'review-notes.jsonl'), 'utf8')
      .split('\n')
      .filter((line) => line.includes(`"${note}"`));

  before(async () => {
    service = await startService();
  });
  after(async () => {
    await service.stop();
    service.cleanup();
  });

  it('answers with the first call\'s outcome, says when it was first asked and that nothing ran again, and a new id runs it anew', async () => {
    const first = await service.cli(['invoke', 'review-notes/append', '--arg', 'note=twice', '--request-id', 'said-once']);
    expect(first.code, first.stderr).to.equal(0);
    expect(first.stdout).to.not.contain('first asked');
    // At once: the first call has ended, so this one repeats it however soon it comes.
    const again = await service.cli(['invoke', 'review-notes/append', '--arg', 'note=twice', '--request-id', 'said-once']);
    expect(again.code, again.stderr).to.equal(0);
    expect(again.stdout).to.match(/^Completed: said-once\n {2}operation [0-9a-f]{64}\n {2}first asked at \d{4}-\d\d-\d\dT[\d:.]+Z: this is that request's answer, and nothing ran again \(a new --request-id runs it anew\)\n/);
    expect(lines('twice')).to.have.length(1);
    const json = JSON.parse((await service.cli(['invoke', 'review-notes/append', '--arg', 'note=twice', '--request-id', 'said-once', '--json'])).stdout) as { created_at: number };
    expect(again.stdout).to.contain(new Date(json.created_at).toISOString());
    const anew = await service.cli(['invoke', 'review-notes/append', '--arg', 'note=twice', '--request-id', 'said-again']);
    expect(anew.code, anew.stderr).to.equal(0);
    expect(anew.stdout).to.not.contain('first asked');
    expect(lines('twice')).to.have.length(2);
  });
});

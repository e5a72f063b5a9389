// What a child would refuse is refused when custody.json is read, naming the
// key to change (supervisor/config/load.ts): values inside maps, limits the
// children set (the preamble's 4 KiB, the kernel's 256 tools per executor,
// the executor's day of deadline) and pairs of keys that must agree. Before,
// each passed the configuration and failed the start with a message naming
// a key the operator never wrote.
import { expect } from 'chai';
import { parseConfig } from '../../supervisor/config/load.js';
import { DEADLINE_MAX_MS, executorSchema } from '../../supervisor/config/schema.js';
import { executorSettings } from '../../supervisor/children/specs.js';
import { parseExecutorSettings } from '../../shared/protocol/executor-settings.js';
import { ARGUMENT_FRAME_ENVELOPE_BYTES, argumentBytesBound } from '../../shared/protocol/bounds.js';
import { PREAMBLE_MAX_BYTES, PREAMBLE_TAG } from '../../shared/protocol/preamble.js';
import { EXECUTOR_TOOLS_MAX } from '../../shared/protocol/kernel-messages.js';
import { encodePreamble, preambleBytes } from '../../shared/wire/preamble.js';
import { createSessionSecrets } from '../../shared/wire/session-keys.js';
import { SessionEndpoint } from '../../shared/wire/session.js';
import { MESSAGES } from '../../shared/protocol/messages.js';
import { ARTIFACT_MAX_BYTES } from '../../shared/protocol/artifacts.js';
import { canonicalBytes } from '../../shared/canonical/jcs.js';
import { configRefusal } from '../helpers/config-refusal.js';


const executor = (fields: Record<string, unknown>) => ({ executors: [{ name: 'default', ...fields }] });

/** deadlines_ms entries that make the executor's preamble exactly `bytes` long, by the length of the last tool's name. */
function deadlinesOfPreamble(bytes: number): Record<string, number> {
  const deadlines: Record<string, number> = { '*': 30_000 };
  const measure = () => preambleBytes({ role: 'executor', name: 'default', pinsKernel: true, limits: { max_frame_bytes: 1024 * 1024, max_depth: 32 }, settings: executorSettings(executorSchema.parse({ name: 'default', deadlines_ms: deadlines })) });
  for (let i = 0; measure() < bytes - 200; i++) deadlines[`tool-${i}/${'x'.repeat(60)}`] = 1_000;
  const last = 'pad/';
  deadlines[`${last}x`] = 1_000;
  const short = bytes - measure();
  delete deadlines[`${last}x`];
  deadlines[`${last}${'x'.repeat(1 + short)}`] = 1_000;
  expect(measure()).to.equal(bytes);
  return deadlines;
}

describe('custody.json: what the children would refuse', () => {
  it(`executors[].deadlines_ms values: ${DEADLINE_MAX_MS} (a day less the executor's 5 s margin) is taken and the executor takes what it is sent; one past is refused, naming the key`, () => {
    expect(DEADLINE_MAX_MS).to.equal(86_395_000);
    for (const key of ['*', 'review-notes/append']) {
      const config = parseConfig(executor({ deadlines_ms: { [key]: DEADLINE_MAX_MS } }));
      expect(() => parseExecutorSettings(executorSettings(config.executors[0]!)), 'the executor takes its deadline').to.not.throw();
      expect(configRefusal(executor({ deadlines_ms: { [key]: DEADLINE_MAX_MS + 1 } }))).to.contain(`executors.0.deadlines_ms.${key}`).and.to.contain('86395000');
    }
  });

  it(`executors[].tools: ${EXECUTOR_TOOLS_MAX} are taken, one more is refused (the kernel's executor.pin holds ${EXECUTOR_TOOLS_MAX})`, () => {
    const tools = (n: number) => Array.from({ length: n }, (_, i) => `tool-${i}/*`);
    expect(parseConfig(executor({ tools: tools(EXECUTOR_TOOLS_MAX) })).executors[0]!.tools).to.have.length(EXECUTOR_TOOLS_MAX);
    expect(configRefusal(executor({ tools: tools(EXECUTOR_TOOLS_MAX + 1) }))).to.contain('executors.0.tools').and.to.contain(`<=${EXECUTOR_TOOLS_MAX}`);
  });

  it(`an executor's preamble of ${PREAMBLE_MAX_BYTES} bytes is taken and is what the child is sent; one byte more is refused, naming the keys to shorten`, () => {
    const deadlines = deadlinesOfPreamble(PREAMBLE_MAX_BYTES);
    const config = parseConfig(executor({ deadlines_ms: deadlines }));
    // The measure is the line a start writes (its newline aside), with real secrets and challenge.
    const secrets = createSessionSecrets();
    const line = encodePreamble({
      custody: PREAMBLE_TAG,
      sid: secrets.sid,
      key: secrets.key.toString('hex'),
      role: 'executor',
      name: 'default',
      challenge: 'c'.repeat(64),
      mode: 'provision',
      pins: { kernel: 'a'.repeat(64) },
      limits: { max_frame_bytes: config.bounds.max_frame_bytes, max_depth: config.bounds.max_depth },
      settings: executorSettings(config.executors[0]!),
    });
    expect(line.length - 1).to.equal(PREAMBLE_MAX_BYTES);
    const over = deadlinesOfPreamble(PREAMBLE_MAX_BYTES + 1);
    expect(configRefusal(executor({ deadlines_ms: over }))).to.contain(`preamble of ${PREAMBLE_MAX_BYTES + 1} bytes`).and.to.contain('shorten executors.0.settings or executors.0.deadlines_ms');
  });

  it('a kernel.settings too long for its preamble is refused, naming kernel.settings', () => {
    const perTool = Object.fromEntries(Array.from({ length: 80 }, (_, i) => [`tool-${i}/${'x'.repeat(40)}`, 1024]));
    expect(configRefusal({ kernel: { settings: { argument_bytes_per_tool: perTool } } })).to.match(/kernel\.settings: makes a preamble of \d+ bytes/);
  });

  it('an argument bound the frame bound cannot carry is refused, at the bound and one past, for the default and for a tool', () => {
    const frame = 131_072;
    const carried = frame - ARGUMENT_FRAME_ENVELOPE_BYTES;
    const settings = (bytes: number) => ({ max_request_bytes: 1024 * 1024, argument_bytes_default: bytes });
    expect(argumentBytesBound(settings(carried), null), 'the bound resolves to what was set').to.equal(carried);
    expect(() => parseConfig({ bounds: { max_frame_bytes: frame }, kernel: { settings: settings(carried) } })).to.not.throw();
    expect(configRefusal({ bounds: { max_frame_bytes: frame }, kernel: { settings: settings(carried + 1) } }))
      .to.contain('kernel.settings.argument_bytes_default')
      .and.to.contain(`at most ${carried}`)
      .and.to.contain('raise bounds.max_frame_bytes');
    const perTool = (bytes: number) => ({ max_request_bytes: 1024 * 1024, argument_bytes_per_tool: { 'review-notes/append': bytes } });
    expect(() => parseConfig({ bounds: { max_frame_bytes: frame }, kernel: { settings: perTool(carried) } })).to.not.throw();
    expect(configRefusal({ bounds: { max_frame_bytes: frame }, kernel: { settings: perTool(carried + 1) } })).to.contain('kernel.settings.argument_bytes_per_tool["review-notes/append"]');
    // The defaults fit the smallest frame bound.
    expect(() => parseConfig({ bounds: { max_frame_bytes: frame } })).to.not.throw();
  });

  it('arguments at the bound the frame carries fit the largest frame that carries them: an execute with an authorization at its cap, all escapes', () => {
    const frame = 131_072;
    const carried = frame - ARGUMENT_FRAME_ENVELOPE_BYTES;
    const args = { note: 'n'.repeat(carried - canonicalBytes({ note: '' }).length) };
    expect(canonicalBytes(args).length).to.equal(carried);
    const sender = new SessionEndpoint({ secrets: createSessionSecrets(), side: 'supervisor', self: 'supervisor', peer: 'executor', limits: { maxFrameBytes: frame, maxDepth: 32 } });
    const hex = 'f'.repeat(64);
    const body = {
      // Every character a quote: escaping doubles the cap's 32 KiB.
      authorization: '"'.repeat(ARTIFACT_MAX_BYTES.authorization),
      expected: { operation_id: hex, request_id: 'r'.repeat(128), request_binding_hash: hex, capability_id: 'c'.repeat(128), capability_digest: hex, tool: `${'t'.repeat(60)}/${'u'.repeat(67)}`, parameters_digest: hex },
      arguments: args,
      drop_reply: false,
    };
    expect(MESSAGES.execute.request.safeParse(body).success, 'a valid execute').to.equal(true);
    expect(sender.seal('execute', 'q'.repeat(32), body).length).to.be.at.most(frame);
  });

  it("the children's own settings are checked with the configuration, named as custody.json names them", () => {
    expect(configRefusal(executor({ settings: { note_max_bytes: 0 } }))).to.match(/executors\.0\.settings: note_max_bytes/);
    expect(configRefusal(executor({ settings: { unknown_key: 1 } }))).to.match(/executors\.0\.settings: .*unknown_key/);
    expect(configRefusal({ kernel: { settings: { nonce_ttl_ms: 0 } } })).to.match(/kernel\.settings: nonce_ttl_ms/);
    expect(configRefusal({ kernel: { settings: { max_request_bytes: 1024, argument_bytes_default: 2048 } } })).to.match(/kernel\.settings: argument bound for default/);
    // Another program's executor may take other keys: its settings are its own.
    expect(() => parseConfig(executor({ argv: ['/usr/bin/true'], settings: { unknown_key: 1 } }))).to.not.throw();
  });

  it('an executor setting custody.json sets itself is refused in settings, naming the key that sets it', () => {
    for (const [key, instead, value] of [
      ['max_in_flight', 'executors.0.max_in_flight', 3],
      ['claim_capacity', 'executors.0.claim_capacity', 100],
      ['executor_id', 'executors.0.name', 'other'],
      ['adapter_deadline_ms', 'executors.0.deadlines_ms["*"]', 1_000],
      ['adapter_deadlines', 'executors.0.deadlines_ms', {}],
    ] as const) {
      expect(configRefusal(executor({ settings: { [key]: value } }))).to.contain(`executors.0.settings.${key}: set by ${instead}`);
    }
  });
});

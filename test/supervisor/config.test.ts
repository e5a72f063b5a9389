import { expect } from 'chai';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { defaultConfig, loadConfig, parseConfig } from '../../supervisor/config/load.js';
import { configRefusal } from '../helpers/config-refusal.js';


describe('custody.json', () => {
  it('is complete from an empty object: every key has a default', () => {
    const config = parseConfig({});
    expect(config.port).to.equal(8421);
    expect(config.executors).to.have.length(1);
    expect(config.executors[0]).to.include({ name: 'default', max_in_flight: 64, claim_capacity: 50_000 });
    expect(config.executors[0]!.tools).to.deep.equal(['review-notes/*']);
    expect(config.restart).to.deep.equal({ max_restarts: 5, period_s: 60, backoff_initial_ms: 200, backoff_max_ms: 10_000, failed_cooldown_s: 300, quarantine_after_crashes: 2 });
    expect(config.bounds.max_frame_bytes).to.equal(1024 * 1024);
  });

  it('names the key and the value it refuses', () => {
    expect(configRefusal({ port: 70_000 })).to.match(/custody\.json: port: .*got 70000/);
    expect(configRefusal({ executors: [{ name: 'a', max_in_flight: 0 }] })).to.match(/executors\.0\.max_in_flight: .*got 0/);
    expect(configRefusal({ restart: { max_restart: 3 } })).to.match(/restart: unknown key\(s\) "max_restart"/);
    expect(configRefusal({ timing: { reconcile_backoff_max_ms: 900 } })).to.match(/timing: unknown key\(s\) "reconcile_backoff_max_ms" \(renamed "retry_backoff_max_ms": rename it in timing\)/);
    expect(configRefusal({ executors: [{ name: 'a' }, { name: 'a' }] })).to.match(/executors\.1\.name: "a" is used twice/);
    expect(configRefusal({ executors: [{ name: 'a', deadlines_ms: { 'Not A Tool': 5 } }] })).to.match(/deadlines_ms: key "Not A Tool"/);
    expect(configRefusal({ restart: { backoff_initial_ms: 900, backoff_max_ms: 100 } })).to.match(/backoff_initial_ms: 900 is above/);
    expect(configRefusal({ executors: [{ name: 'kernel' }] })).to.match(/executors\.0\.name: "kernel" is the kernel's name; choose another/);
  });

  it('holds each bound at its limit and refuses one past it', () => {
    expect(parseConfig({ bounds: { max_frame_bytes: 1024 * 1024 } }).bounds.max_frame_bytes).to.equal(1024 * 1024);
    expect(configRefusal({ bounds: { max_frame_bytes: 1024 * 1024 + 1 } })).to.match(/bounds\.max_frame_bytes/);
    expect(parseConfig({ bounds: { max_frame_bytes: 131_072 } }).bounds.max_frame_bytes).to.equal(131_072);
    expect(configRefusal({ bounds: { max_frame_bytes: 131_071 } })).to.match(/bounds\.max_frame_bytes.*got 131071/);
    expect(parseConfig({ bounds: { max_depth: 32 } }).bounds.max_depth).to.equal(32);
    expect(configRefusal({ bounds: { max_depth: 33 } })).to.match(/bounds\.max_depth/);
    expect(parseConfig({ executors: [{ name: 'a', max_in_flight: 1024 }] }).executors[0]!.max_in_flight).to.equal(1024);
    expect(configRefusal({ executors: [{ name: 'a', max_in_flight: 1025 }] })).to.match(/max_in_flight/);
    expect(parseConfig({ bounds: { max_body_bytes: 1024 * 1024 } }).bounds.max_body_bytes).to.equal(1024 * 1024);
    expect(configRefusal({ bounds: { max_body_bytes: 1024 * 1024 + 1 } })).to.match(/max_body_bytes/);
    expect(parseConfig({}).bounds.max_connections).to.equal(1024);
    expect(parseConfig({ bounds: { max_connections: 1_000_000 } }).bounds.max_connections).to.equal(1_000_000);
    expect(configRefusal({ bounds: { max_connections: 1_000_001 } })).to.match(/bounds\.max_connections.*got 1000001/);
    expect(parseConfig({ bounds: { max_connections: 1 } }).bounds.max_connections).to.equal(1);
    expect(configRefusal({ bounds: { max_connections: 0 } })).to.match(/bounds\.max_connections.*got 0/);
    expect(parseConfig({}).bounds.max_requests_in_flight).to.equal(4096);
    expect(parseConfig({ bounds: { max_requests_in_flight: 1_000_000 } }).bounds.max_requests_in_flight).to.equal(1_000_000);
    expect(configRefusal({ bounds: { max_requests_in_flight: 1_000_001 } })).to.match(/bounds\.max_requests_in_flight.*got 1000001/);
    expect(parseConfig({ bounds: { max_requests_in_flight: 1 } }).bounds.max_requests_in_flight).to.equal(1);
    expect(configRefusal({ bounds: { max_requests_in_flight: 0 } })).to.match(/bounds\.max_requests_in_flight.*got 0/);
    expect(parseConfig({}).bounds.max_reads_in_flight).to.equal(32);
    expect(parseConfig({ bounds: { max_reads_in_flight: 4096 } }).bounds.max_reads_in_flight).to.equal(4096);
    expect(configRefusal({ bounds: { max_reads_in_flight: 4097 } })).to.match(/bounds\.max_reads_in_flight.*got 4097/);
    expect(parseConfig({ bounds: { max_reads_in_flight: 1 } }).bounds.max_reads_in_flight).to.equal(1);
    expect(configRefusal({ bounds: { max_reads_in_flight: 0 } })).to.match(/bounds\.max_reads_in_flight.*got 0/);
    expect(parseConfig({}).timing.child_read_timeout_ms).to.equal(30_000);
    expect(parseConfig({ timing: { child_read_timeout_ms: 1 } }).timing.child_read_timeout_ms).to.equal(1);
    expect(configRefusal({ timing: { child_read_timeout_ms: 0 } })).to.match(/timing\.child_read_timeout_ms.*got 0/);
    expect(parseConfig({ timing: { child_read_timeout_ms: 600_000 } }).timing.child_read_timeout_ms).to.equal(600_000);
    expect(configRefusal({ timing: { child_read_timeout_ms: 600_001 } })).to.match(/timing\.child_read_timeout_ms.*got 600001/);
    expect(parseConfig({}).timing).to.include({ api_headers_timeout_ms: 10_000, api_request_timeout_ms: 30_000 });
    expect(parseConfig({ timing: { api_headers_timeout_ms: 1_000, api_request_timeout_ms: 1_000 } }).timing.api_headers_timeout_ms).to.equal(1_000);
    expect(configRefusal({ timing: { api_headers_timeout_ms: 999 } })).to.match(/timing\.api_headers_timeout_ms.*got 999/);
    expect(parseConfig({ timing: { api_headers_timeout_ms: 600_000 } }).timing.api_headers_timeout_ms).to.equal(600_000);
    expect(configRefusal({ timing: { api_headers_timeout_ms: 600_001 } })).to.match(/timing\.api_headers_timeout_ms.*got 600001/);
    expect(parseConfig({ timing: { api_request_timeout_ms: 3_600_000 } }).timing.api_request_timeout_ms).to.equal(3_600_000);
    expect(configRefusal({ timing: { api_request_timeout_ms: 3_600_001 } })).to.match(/timing\.api_request_timeout_ms.*got 3600001/);
    expect(configRefusal({ timing: { api_request_timeout_ms: 999 } })).to.match(/timing\.api_request_timeout_ms.*got 999/);
    expect(parseConfig({ restart: { failed_cooldown_s: 86_400 } }).restart.failed_cooldown_s).to.equal(86_400);
    expect(configRefusal({ restart: { failed_cooldown_s: 86_401 } })).to.match(/restart\.failed_cooldown_s.*got 86401/);
    expect(parseConfig({ restart: { failed_cooldown_s: 1 } }).restart.failed_cooldown_s).to.equal(1);
    expect(configRefusal({ restart: { failed_cooldown_s: 0 } })).to.match(/restart\.failed_cooldown_s.*got 0/);
    expect(parseConfig({ restart: { quarantine_after_crashes: 1 } }).restart.quarantine_after_crashes).to.equal(1);
    expect(configRefusal({ restart: { quarantine_after_crashes: 0 } })).to.match(/restart\.quarantine_after_crashes.*got 0/);
    expect(parseConfig({ restart: { quarantine_after_crashes: 100 } }).restart.quarantine_after_crashes).to.equal(100);
    expect(configRefusal({ restart: { quarantine_after_crashes: 101 } })).to.match(/restart\.quarantine_after_crashes/);
    expect(parseConfig({ timing: { executor_wait_ms: 600_000 } }).timing.executor_wait_ms).to.equal(600_000);
    expect(configRefusal({ timing: { executor_wait_ms: 600_001 } })).to.match(/timing\.executor_wait_ms.*got 600001/);
    expect(parseConfig({ timing: { executor_wait_ms: 0 } }).timing.executor_wait_ms).to.equal(0);
    expect(configRefusal({ timing: { executor_wait_ms: -1 } })).to.match(/timing\.executor_wait_ms.*got -1/);
    expect(parseConfig({ timing: { kernel_head_linger_ms: 1_000 } }).timing.kernel_head_linger_ms).to.equal(1_000);
    expect(configRefusal({ timing: { kernel_head_linger_ms: 1_001 } })).to.match(/timing\.kernel_head_linger_ms.*got 1001/);
    expect(parseConfig({ timing: { kernel_head_linger_ms: 0 } }).timing.kernel_head_linger_ms).to.equal(0);
    expect(configRefusal({ timing: { kernel_head_linger_ms: -1 } })).to.match(/timing\.kernel_head_linger_ms.*got -1/);
    expect(parseConfig({ timing: { migrate_timeout_ms: 86_400_000 } }).timing.migrate_timeout_ms).to.equal(86_400_000);
    expect(configRefusal({ timing: { migrate_timeout_ms: 86_400_001 } })).to.match(/timing\.migrate_timeout_ms.*got 86400001/);
    expect(parseConfig({ timing: { migrate_timeout_ms: 1 } }).timing.migrate_timeout_ms).to.equal(1);
    expect(configRefusal({ timing: { migrate_timeout_ms: 0 } })).to.match(/timing\.migrate_timeout_ms.*got 0/);
    expect(parseConfig({ timing: { archive_interval_ms: 86_400_000 } }).timing.archive_interval_ms).to.equal(86_400_000);
    expect(configRefusal({ timing: { archive_interval_ms: 86_400_001 } })).to.match(/timing\.archive_interval_ms.*got 86400001/);
    expect(parseConfig({ timing: { archive_interval_ms: 0 } }).timing.archive_interval_ms, '0: only custody archive').to.equal(0);
    expect(configRefusal({ timing: { archive_interval_ms: -1 } })).to.match(/timing\.archive_interval_ms.*got -1/);
    expect(parseConfig({ bounds: { recovery_sweep_operations: 100_000 } }).bounds.recovery_sweep_operations).to.equal(100_000);
    expect(configRefusal({ bounds: { recovery_sweep_operations: 100_001 } })).to.match(/bounds\.recovery_sweep_operations.*got 100001/);
    expect(parseConfig({ bounds: { recovery_sweep_operations: 1 } }).bounds.recovery_sweep_operations).to.equal(1);
    expect(configRefusal({ bounds: { recovery_sweep_operations: 0 } })).to.match(/bounds\.recovery_sweep_operations.*got 0/);
  });

  it('defaults the pool wait to 10 s and metrics to no token on loopback', () => {
    const config = parseConfig({});
    expect(config.timing.executor_wait_ms).to.equal(10_000);
    expect(config.timing.kernel_head_linger_ms).to.equal(50);
    expect(config.timing.migrate_timeout_ms).to.equal(3_600_000);
    expect(config.timing.archive_interval_ms, 'a live ledger archived on its own').to.equal(10_000);
    expect(config.bounds.recovery_sweep_operations).to.equal(10_000);
    expect(config.metrics).to.deep.equal({ require_token: false });
    expect(configRefusal({ metrics: { require_token: 'yes' } })).to.match(/metrics\.require_token/);
  });

  it('names N executors executor-1 … executor-N in the default configuration', () => {
    expect(defaultConfig(3).executors.map((e) => e.name)).to.deep.equal(['executor-1', 'executor-2', 'executor-3']);
    expect(defaultConfig(1).executors.map((e) => e.name)).to.deep.equal(['default']);
  });

  it('reads a custody.json saved with a byte order mark, and names the file when it is not JSON', () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'custody-config-'));
    try {
      const file = path.join(dir, 'custody.json');
      writeFileSync(file, '\uFEFF' + JSON.stringify({ port: 9999 }));
      expect(loadConfig(file).port).to.equal(9999);
      writeFileSync(file, '\uFEFF{"port": 9999,}');
      expect(() => loadConfig(file)).to.throw(`${file}: not valid JSON`);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

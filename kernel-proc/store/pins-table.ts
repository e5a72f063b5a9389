// Executor pins. An executor id may be pinned at several key epochs; the
// highest is current, and the older rows stay so that a report or an
// authorization for a superseded epoch is recognised as stale, not unknown.
import type Database from 'better-sqlite3';

export interface PinRow {
  readonly executor_id: string;
  readonly key_epoch: number;
  readonly public_key: string;
  /** JSON array of the tool patterns the executor serves. */
  readonly tools: string;
  readonly pinned_at: number;
}

export class PinsTable {
  readonly #current: Database.Statement<[string], PinRow>;
  readonly #at: Database.Statement<[string, number], PinRow>;
  readonly #all: Database.Statement<[], PinRow>;
  readonly #allCurrent: Database.Statement<[], PinRow>;
  readonly #insert: Database.Statement<[PinRow]>;
  readonly #setTools: Database.Statement<[{ executor_id: string; key_epoch: number; tools: string }]>;

  constructor(db: Database.Database) {
    this.#current = db.prepare('SELECT * FROM executor_pins WHERE executor_id = ? ORDER BY key_epoch DESC LIMIT 1');
    this.#at = db.prepare('SELECT * FROM executor_pins WHERE executor_id = ? AND key_epoch = ?');
    this.#all = db.prepare('SELECT * FROM executor_pins ORDER BY executor_id, key_epoch');
    this.#allCurrent = db.prepare(`
      SELECT p.* FROM executor_pins p
      WHERE p.key_epoch = (SELECT max(q.key_epoch) FROM executor_pins q WHERE q.executor_id = p.executor_id)
      ORDER BY p.executor_id`);
    this.#insert = db.prepare(`
      INSERT INTO executor_pins (executor_id, key_epoch, public_key, tools, pinned_at)
      VALUES (@executor_id, @key_epoch, @public_key, @tools, @pinned_at)`);
    this.#setTools = db.prepare('UPDATE executor_pins SET tools = @tools WHERE executor_id = @executor_id AND key_epoch = @key_epoch');
  }

  /** The pin of one executor key epoch, current or retired. */
  at(executorId: string, keyEpoch: number): PinRow | undefined {
    return this.#at.get(executorId, keyEpoch);
  }

  /** Every pin, every epoch, by executor then epoch. */
  all(): PinRow[] {
    return this.#all.all();
  }

  current(executorId: string): PinRow | undefined {
    return this.#current.get(executorId);
  }

  /** The current pin of every executor, by id. */
  allCurrent(): PinRow[] {
    return this.#allCurrent.all();
  }

  insert(row: PinRow): void {
    this.#insert.run(row);
  }

  setTools(executorId: string, keyEpoch: number, tools: readonly string[]): void {
    this.#setTools.run({ executor_id: executorId, key_epoch: keyEpoch, tools: JSON.stringify(tools) });
  }
}

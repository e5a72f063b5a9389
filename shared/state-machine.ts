// State machines as data (STYLE.md): each machine is a table of the moves it
// allows, and one function makes a move or refuses it with a typed error.
// Nothing else assigns a state.
import { CustodyError } from './errors.js';

export type TransitionTable<S extends string> = { readonly [From in S]: readonly S[] };

export class MachineDefinition<S extends string> {
  readonly name: string;
  readonly table: TransitionTable<S>;

  constructor(name: string, table: TransitionTable<S>) {
    this.name = name;
    this.table = table;
  }

  get states(): S[] {
    return Object.keys(this.table) as S[];
  }

  /** States with no way out. */
  get terminal(): S[] {
    return this.states.filter((state) => this.table[state].length === 0);
  }

  isTerminal(state: S): boolean {
    return this.table[state].length === 0;
  }

  canMove(from: S, to: S): boolean {
    return this.table[from].includes(to);
  }

  /** Refuse an illegal move with `illegal_transition`, naming the machine, both states and the subject. */
  assertMove(from: S, to: S, subject = ''): void {
    if (!this.canMove(from, to)) {
      const what = subject ? ` for ${subject}` : '';
      throw new CustodyError('illegal_transition', `${this.name}: no transition from ${from} to ${to}${what}`);
    }
  }
}

export function defineMachine<S extends string>(name: string, table: TransitionTable<S>): MachineDefinition<S> {
  return new MachineDefinition(name, table);
}

/** An in-memory instance of a machine; `onMove` sees every change (for logs). */
export class Machine<S extends string> {
  readonly #definition: MachineDefinition<S>;
  readonly #onMove: ((from: S, to: S, reason: string) => void) | undefined;
  #state: S;

  constructor(definition: MachineDefinition<S>, initial: S, onMove?: (from: S, to: S, reason: string) => void) {
    this.#definition = definition;
    this.#state = initial;
    this.#onMove = onMove;
  }

  get state(): S {
    return this.#state;
  }

  is(...states: S[]): boolean {
    return states.includes(this.#state);
  }

  moveTo(to: S, reason = ''): void {
    const from = this.#state;
    this.#definition.assertMove(from, to);
    this.#state = to;
    this.#onMove?.(from, to, reason);
  }
}

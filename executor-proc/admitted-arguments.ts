// Arguments the adapter admitted at `arguments.check`, remembered for the
// `execute` that follows (docs/PERFORMANCE.md, "Stop 19: one argument check per
// operation"). The supervisor asks the check just before it reserves a new
// request; without this memory the execute of the same arguments asked the
// adapter host the same question again, one more round trip between two
// processes on every operation.
//
// What makes it safe: the verdict on arguments holds for good (the
// authorization binds them, docs/PROTOCOL.md §6), and execute reads the
// memory only for the arguments it has just checked against the
// authorization's parameters digest. An entry is taken once, is forgotten
// when the adapter host that gave it is replaced (a restarted host may have
// loaded other adapter code), and the memory keeps at most
// `admitted_arguments_max` entries, the oldest going first; 0 turns it off,
// for an adapter whose argumentSchema is not a function of the arguments
// alone (executor-proc/ADAPTERS.md).

export class AdmittedArguments {
  readonly #max: number;
  /** `tool \n parameters digest` → the adapter host generation that admitted them, oldest first. */
  readonly #entries = new Map<string, number>();

  constructor(max: number) {
    this.#max = max;
  }

  /** The adapter host of `generation` admitted these arguments for `tool`. */
  remember(tool: string, parametersDigest: string, generation: number): void {
    if (this.#max === 0) return;
    const key = keyOf(tool, parametersDigest);
    this.#entries.delete(key);
    this.#entries.set(key, generation);
    for (const oldest of this.#entries.keys()) {
      if (this.#entries.size <= this.#max) break;
      this.#entries.delete(oldest);
    }
  }

  /** Whether the host of `generation` admitted them and they were not taken yet; the entry is gone either way. */
  take(tool: string, parametersDigest: string, generation: number): boolean {
    const key = keyOf(tool, parametersDigest);
    const admittedBy = this.#entries.get(key);
    if (admittedBy === undefined) return false;
    this.#entries.delete(key);
    return admittedBy === generation;
  }
}

function keyOf(tool: string, parametersDigest: string): string {
  return `${tool}\n${parametersDigest}`;
}

// The command line of the benches that take a switch or a few counts
// (npm run bench, bench:pages, bench:archive, bench:listing): `--help` prints
// the usage line and exits 0; an unknown option or a count that is not a
// whole number of at least 1 prints why and the usage line on stderr and
// exits 2, before anything is measured.

export interface ScriptArgs {
  /** The switches given, of those the script takes. */
  readonly switches: ReadonlySet<string>;
  /** The counts, in order, each given or its fallback. */
  readonly counts: readonly number[];
}

export function scriptArgs(usage: string, spec: { readonly switches?: readonly string[]; readonly counts?: ReadonlyArray<{ readonly name: string; readonly fallback: number }> }, argv = process.argv.slice(2)): ScriptArgs {
  const refuse = (why: string): never => {
    process.stderr.write(`${why}\n${usage}\n`);
    process.exit(2);
  };
  if (argv.includes('--help')) {
    process.stdout.write(`${usage}\n`);
    process.exit(0);
  }
  const known = new Set(spec.switches ?? []);
  const counts = spec.counts ?? [];
  const switches = new Set<string>();
  const given: string[] = [];
  for (const arg of argv) {
    if (arg.startsWith('-')) {
      if (!known.has(arg)) refuse(`unknown option ${JSON.stringify(arg)}`);
      switches.add(arg);
    } else {
      given.push(arg);
    }
  }
  if (given.length > counts.length) refuse(`${given.length} counts given, at most ${counts.length} taken`);
  return {
    switches,
    counts: counts.map(({ name, fallback }, i) => {
      const text = given[i];
      if (text === undefined) return fallback;
      const value = Number(text);
      return Number.isInteger(value) && value >= 1 ? value : refuse(`${name} takes a whole number of at least 1, got ${JSON.stringify(text)}`);
    }),
  };
}

// How the CLI talks to people and scripts: human text by default, one JSON
// document with --json, and a progress line on stderr for anything that
// waits more than a second (only on a terminal that reports its width). The spinner library is
// loaded only then: `custody start` after a crash should not pay for it.

export interface Output {
  readonly json: boolean;
  /** Print the result: the JSON document, or the human lines. */
  result(document: unknown, human: () => string): void;
  /** Run `work`, showing `label` with a spinner if it takes more than a second. */
  progress<T>(label: string, work: Promise<T>): Promise<T>;
}

export function createOutput(json: boolean): Output {
  return {
    json,
    result(document, human) {
      process.stdout.write(json ? JSON.stringify(document, null, 2) + '\n' : human().replace(/\n?$/, '\n'));
    },
    async progress(label, work) {
      // A terminal that reports no width (a pty nobody sized: 0 columns) would make the
      // spinner clear lines without end as it redraws (35 MB for one custody init).
      if (json || !process.stderr.isTTY || !(process.stderr.columns > 0)) return work;
      const started = Date.now();
      const { default: ora } = await import('ora');
      const spinner = ora({ text: label, stream: process.stderr });
      const timer = setTimeout(() => spinner.start(), 1000);
      const tick = setInterval(() => (spinner.text = `${label} (${Math.round((Date.now() - started) / 1000)} s)`), 1000);
      try {
        return await work;
      } finally {
        clearTimeout(timer);
        clearInterval(tick);
        if (spinner.isSpinning) spinner.stop();
      }
    },
  };
}

/** A fixed-width table for human output. */
export function table(headers: readonly string[], rows: ReadonlyArray<ReadonlyArray<string | number | null>>): string {
  const cells = [headers, ...rows.map((row) => row.map((cell) => (cell === null ? '-' : String(cell))))];
  const widths = headers.map((_, i) => Math.max(...cells.map((row) => (row[i] ?? '').length)));
  return cells.map((row) => row.map((cell, i) => (cell ?? '').padEnd(widths[i]!)).join('  ').trimEnd()).join('\n');
}

export function formatDuration(ms: number | null): string {
  if (ms === null) return '-';
  const s = Math.floor(ms / 1000);
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m${String(s % 60).padStart(2, '0')}s`;
  return `${Math.floor(s / 3600)}h${String(Math.floor((s % 3600) / 60)).padStart(2, '0')}m`;
}

export function formatTime(ms: number): string {
  return new Date(ms).toISOString();
}

// custody export: every operation and the recent incidents the service holds,
// as NDJSON on stdout — one JSON object per line, each tagged with its
// `record` ("operation" or "incident") — for log pipelines and jq. Written
// through ndjson's stringify stream, so a reader sees lines as they come.
import { Readable, type Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import ndjson from 'ndjson';
import { incidentsAnswer, operationsAnswer } from '../../api/answers.js';
import type { ServiceClient } from '../client.js';

/** As many as the API lists in one answer: every operation, and the most recent incidents. */
const OPERATIONS_LIMIT = 100_000;
const INCIDENTS_LIMIT = 1000;

export async function exportCommand(client: ServiceClient, output: Writable = process.stdout): Promise<number> {
  const [operations, incidents] = await Promise.all([
    client.get(`/v1/operations?limit=${OPERATIONS_LIMIT}`, operationsAnswer),
    client.get(`/v1/incidents?limit=${INCIDENTS_LIMIT}`, incidentsAnswer),
  ]);
  const records = [
    ...operations.body.operations.map((operation) => ({ record: 'operation', ...operation })),
    ...incidents.body.incidents.map((incident) => ({ record: 'incident', ...incident })),
  ];
  // stdout stays open after the last line: the process ends it.
  await pipeline(Readable.from(records), ndjson.stringify(), output, { end: output !== process.stdout });
  return 0;
}

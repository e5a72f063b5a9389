// custody export: every operation and the recent incidents the service holds,
// as NDJSON on stdout — one JSON object per line, each tagged with its
// `record` ("operation" or "incident") — for log pipelines and jq. Written
// through ndjson's stringify stream, so a reader sees lines as they come.
// Operations are read a page at a time, newest first (GET /v1/operations
// after the previous answer's next_after), so a long history is written as
// it is read and never held whole. Each page starts after the key the last
// one ended at: an operation created during the export sorts before every
// key already read and is not written (unless it shares the last key's
// millisecond: then once), and none is written twice.
import { Readable, type Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import ndjson from 'ndjson';
import { incidentsAnswer, operationsAnswer } from '../../api/answers.js';
import { type ServiceClient, pagesOf } from '../client.js';

/** As many as the API lists in one answer. */
export const EXPORT_PAGE = 100_000;
const INCIDENTS_LIMIT = 1000;

export async function exportCommand(client: ServiceClient, output: Writable = process.stdout, page = EXPORT_PAGE): Promise<number> {
  const incidents = await client.get(`/v1/incidents?limit=${INCIDENTS_LIMIT}`, incidentsAnswer);
  async function* records(): AsyncGenerator<Record<string, unknown>> {
    for await (const body of pagesOf(client, `/v1/operations?limit=${page}`, operationsAnswer)) {
      for (const operation of body.operations) yield { record: 'operation', ...operation };
    }
    for (const incident of incidents.body.incidents) yield { record: 'incident', ...incident };
  }
  // stdout stays open after the last line: the process ends it.
  await pipeline(Readable.from(records()), ndjson.stringify(), output, { end: output !== process.stdout });
  return 0;
}

// The load generator's side of every bench: custody's own typed client
// (supervisor/client/index.ts, `custody/client`), as a Node program calling
// the service would, over node:http with keep-alive connections.
//
// Until stop 23 the benches called the API with Node's fetch (undici), which
// spent ~1.5 ms of CPU per invoke at 64 in flight against ~0.6-0.8 for this
// client, on the same two cores as the service: about a quarter of the
// machine went to the load generator (docs/PERFORMANCE.md, "The load
// generator"). Its CPU per operation is reported beside the service's.
import { CustodyClient, isCustodyError } from '../../supervisor/client/index.js';

/** A client for a running service, never retrying: a bench times what happened, not a retry's backoff. */
export function benchClient(port: number, token: string): CustodyClient {
  return new CustodyClient({ url: `http://127.0.0.1:${port}`, token, retries: 0 });
}

/**
 * One call. An error answer or a broken connection is returned as
 * `{ status: 0, body: { code } }` rather than thrown: a bench counts it as a
 * failed operation and goes on.
 */
export async function callApi(client: CustodyClient, method: 'GET' | 'POST' | 'DELETE', route: string, body?: unknown): Promise<{ status: number; body: Record<string, unknown> }> {
  try {
    return await client.request(method, route, body);
  } catch (error) {
    return { status: 0, body: { code: isCustodyError(error) ? error.code : String(error) } };
  }
}

/** The bench's one tool call: an append to the review-notes journal; resolves with its outcome (or the error's code). */
export async function invokeNote(client: CustodyClient, note: string): Promise<unknown> {
  const answer = await callApi(client, 'POST', '/v1/invoke', { tool: 'review-notes/append', arguments: { note } });
  return answer.body.outcome ?? answer.body.code;
}

/** `operations` notes invoked `inFlight` at a time (the notes numbered from 1 after `prefix`). */
export async function invokeNotes(client: CustodyClient, operations: number, inFlight: number, prefix: string): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: inFlight }, async () => {
      while (next < operations) {
        next++;
        await invokeNote(client, `${prefix} ${next}`);
      }
    }),
  );
}

/** CPU of this process (user + system, every thread) in ms, for the load generator's share. */
export function ownCpuMs(): number {
  const { user, system } = process.cpuUsage();
  return (user + system) / 1000;
}

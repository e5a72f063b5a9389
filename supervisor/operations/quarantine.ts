// No poison pills (docs/POISON-AND-DISK.md): a child that crashes, poisons
// its channel or misses its heartbeat takes the blame off itself and puts it
// on the client requests that were in flight on it at that moment. Each such
// crash is counted per request in supervisor.db (an incident); at
// `restart.quarantine_after_crashes` (default 2) the request is parked as
// `quarantined` and never sent again until an operator releases it.
//
// What counts toward the child's restart intensity: a crash with no request
// in flight, or whose requests are all still below the bound, counts as
// before (the first crash of a poison pill cannot be told from a failing
// child). The crash that quarantines a request, and any crash attributed to
// a request already quarantined, does not: the request carries it, so one
// poison pill costs its child at most `quarantine_after_crashes - 1` counted
// restarts and never the service.
import { errorFields, type Logger } from '../../shared/log.js';
import { type SupervisorStore, quarantinedError } from '../store/supervisor-store.js';

export interface CrashVerdict {
  readonly counted: boolean;
  /** Requests this crash quarantined. */
  readonly quarantined: readonly string[];
}

export function attributeCrash(store: SupervisorStore, log: Logger, child: string, requestIds: readonly string[], why: string, limit: number): CrashVerdict {
  const quarantined: string[] = [];
  let carriedByRequest = false;
  for (const requestId of requestIds) {
    const row = store.getRequest(requestId);
    if (!row) continue;
    if (row.phase === 'quarantined') {
      carriedByRequest = true;
      continue;
    }
    try {
      const counted = store.countCrash(requestId, child, why, limit);
      log.warn('request_crash_counted', { request_id: requestId, child, crashes: counted.crashes, limit, why });
      if (counted.quarantined) {
        quarantined.push(requestId);
        carriedByRequest = true;
        log.error('request_quarantined', { request_id: requestId, child, crashes: counted.crashes });
      }
    } catch (error) {
      // A full disk: the count is lost for this crash, which then counts for the child as before.
      log.error('request_crash_not_counted', { request_id: requestId, child, ...errorFields(error) });
    }
  }
  return { counted: !carriedByRequest, quarantined };
}

/** The admission check before a request is sent to a child: a quarantined request is refused. */
export function admitRequest(store: SupervisorStore, requestId: string): void {
  if (store.phaseOf(requestId) === 'quarantined') throw quarantinedError(store.getRequest(requestId)!);
}

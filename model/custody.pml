/*
 * custody.pml: the operation protocol as custody builds it, for one
 * operation, checked with spin. See model/README.md for how to run it and
 * docs/ARCHITECTURE.md §6 for the protocol it abstracts.
 *
 * Durable state (kernel.db, ledger.db, the journal, supervisor.db's request
 * log) is global and survives every crash. What a process holds in memory
 * (the executor's worker, the supervisor's wait) is lost when it dies.
 *
 * Kernel requests are modelled as one atomic step each: the kernel applies a
 * request in one transaction (kernel-proc/commit-queue.ts) and every request
 * is idempotent by request id and bytes, so a kernel that dies before its
 * commit is a request not applied, and one that dies after it is a lost
 * reply; the supervisor retries both (supervisor/operations/kernel-steps.ts).
 *
 * Variants (each -D flag breaks one rule on purpose; the default is the code):
 *   BROKEN_FENCE    reconcile answers not_applied without fencing the key,
 *                   and the append does not look for a fence    (race H3)
 *   BROKEN_CLAIMTX  the window and the refusal are checked before the claim
 *                   transaction instead of inside it            (race H2)
 *   BROKEN_RETRY    the supervisor gives up after one failed reconcile
 *                   exchange                                    (race H4)
 *   BROKEN_RELEASE  a refused start releases the hold whatever its state
 *                                                               (race H1)
 *   REMOTE          a killed executor keeps running what it had accepted
 *                   (its launcher, e.g. ssh, died; it did not)
 *   DURABLE=0       the adapter cannot fence: reconciliation of a claim
 *                   without a report answers indeterminate
 */

#ifndef REMOTE
#define REMOTE 0
#endif
#ifndef DURABLE
#define DURABLE 1
#endif
#ifndef MAX_CRASH
#define MAX_CRASH 2
#endif
#ifndef MAX_LOST
#define MAX_LOST 1
#endif
#ifndef MAX_WD
#define MAX_WD 1
#endif
#ifndef MAX_BACK
#define MAX_BACK 1
#endif

/* kernel operation states (kernel-proc/machines.ts) */
mtype:kst = { K_NONE, K_RESERVED, K_DISPATCHED, K_AWAITING, K_UNKNOWN,
              K_COMPLETED, K_EXPIRED, K_DENIED, K_START_DENIED, K_RELEASED };
/* budget hold */
mtype:hold = { H_NONE, H_HELD, H_RELEASED, H_CONSUMED };
/* report statuses (shared/protocol/artifacts.ts) */
mtype:rep = { R_NONE, R_COMPLETED, R_FAILED, R_APPLIED, R_NOT_APPLIED, R_NEVER };
/* the executor's clock against the window: max(clock, mark) is "now" */
#define INSIDE  0
#define EXPIRED 1
/* supervisor request phases (supervisor/operations/phases.ts) */
mtype:phase = { P_RECEIVED, P_RESERVED, P_AUTHORIZED, P_EXECUTING,
                P_RECONCILING, P_REPORTED, P_SETTLED, P_REFUSED };
/* executor requests and answers */
mtype:msg = { EXECUTE, RECONCILE_OP, A_REPORT, A_UNKNOWN, A_OUTSIDE,
              A_REFUSED, A_INDETERMINATE };
/* the execute worker's steps (executor-proc/handlers/execute.ts) */
mtype:worker = { W_IDLE, W_LOOKED_UP, W_CLAIMED, W_APPLIED, W_NOT_APPLIED };

#define TERMINAL(s) (s == K_COMPLETED || s == K_EXPIRED || s == K_DENIED || \
                     s == K_START_DENIED || s == K_RELEASED)
#define NOW (clock > mark -> clock : mark)

/* ---- kernel.db */
mtype:kst kst = K_NONE;
mtype:hold hold = H_NONE;
byte disposals = 0;
bool ttl_passed = 0;

/* ---- ledger.db */
bool claimed = 0;
bool refused = 0;            /* the never_claimed refusal, same unique key as a claim */
mtype:rep report = R_NONE;   /* insert-once */
bit mark = INSIDE;           /* the clock high-water mark */

/* ---- the journal (resources/review-notes.jsonl) */
byte effects = 0;
bool fenced = 0;

/* ---- supervisor.db: the request log */
mtype:phase phase = P_RECEIVED;
mtype:rep logged_report = R_NONE;
/* the reserve in flight carries its start: reserve_start (docs/PROTOCOL.md §6) */
bool both = 0;

/* ---- processes and their memory */
bit clock = INSIDE;
bool executor_alive = 1;
mtype:worker worker = W_IDLE;
bool zombie = 0;             /* the worker belongs to a killed but running executor */
chan ereq = [1] of { mtype:msg };
chan erep = [1] of { mtype:msg, mtype:rep };

/* ---- faults spent */
byte crashes = 0, lost = 0, watchdogs = 0, backs = 0;

/* ---------------------------------------------------------------- kernel */

inline set_kst(s) {
  /* A terminal state never changes (kernel-proc/machines.ts, the store's trigger). */
  assert(!TERMINAL(kst));
  kst = s
}
inline dispose(h) {
  /* A hold is disposed of at most once (the hold machine and its trigger). */
  assert(hold == H_HELD);
  hold = h;
  disposals++;
  assert(disposals <= 1)
}

/* Settling a report (kernel-proc/decisions/settle.ts). */
inline settle(r) {
  if
  :: kst == K_DISPATCHED || kst == K_AWAITING || kst == K_UNKNOWN ->
       if
       :: r == R_COMPLETED || r == R_APPLIED ->
            /* completed => exactly one effect happened */
            assert(effects == 1);
            set_kst(K_COMPLETED); dispose(H_CONSUMED)
       :: else ->
            /* no effect now, and none can follow: the key is fenced or
             * was never claimed (races H2, H3) */
            assert(effects == 0);
            set_kst(K_RELEASED); dispose(H_RELEASED)
       fi
  :: else -> skip   /* the retained receipt is answered again */
  fi
}

/* A start (kernel-proc/decisions/start.ts): only a reservation moves. */
inline start() {
  if
  :: kst == K_RESERVED && !ttl_passed -> set_kst(K_DISPATCHED)
  :: kst == K_RESERVED && ttl_passed -> set_kst(K_START_DENIED); dispose(H_RELEASED)
#ifdef BROKEN_RELEASE
  :: kst == K_EXPIRED -> kst = K_START_DENIED; hold = H_RELEASED; disposals++; assert(disposals <= 1)
#endif
  :: else -> skip
  fi
}

/* One kernel request: applied in one transaction, or not at all. */
inline kernel_call(kind, applied) {
  atomic {
    if
    :: applied = 1;
       if
       :: kind == P_RECEIVED ->                         /* reserve */
            if
            :: kst == K_NONE -> set_kst(K_RESERVED); hold = H_HELD
            :: kst == K_NONE -> set_kst(K_DENIED)
            :: else -> skip
            fi;
            /* reserve_start: the start naming its nonce, in the same transaction */
            if :: both -> start() :: else -> skip fi
       :: kind == P_RESERVED -> start()
       :: kind == P_REPORTED -> settle(logged_report)
       :: kind == P_RECONCILING ->                      /* mark_unknown */
            if
            :: kst == K_DISPATCHED || kst == K_AWAITING -> kst = K_UNKNOWN
            :: else -> skip
            fi
       fi;
       if
       :: skip
       :: lost < MAX_LOST -> lost++; applied = 0          /* committed, the reply lost */
       fi
    :: crashes < MAX_CRASH -> crashes++; applied = 0   /* died before its commit */
    fi
  }
}

/* The kernel's own work: the nonce TTL sweep, and recovery after a restart. */
proctype Kernel() {
end:
  do
  :: atomic { kst == K_RESERVED && ttl_passed -> set_kst(K_EXPIRED); dispose(H_RELEASED) }
  :: atomic { kst == K_DISPATCHED && crashes < MAX_CRASH -> crashes++; kst = K_AWAITING }
  od
}

/* -------------------------------------------------------------- executor */

inline answer(m, r) {
  if
  :: executor_alive -> erep!m,r
  :: else -> skip                              /* nobody is listening */
  fi
}

/* The execute worker ends; a killed executor's worker has nobody to tell. */
inline worker_done(m, r) {
  worker = W_IDLE;
  if
  :: zombie -> zombie = 0
  :: else -> answer(m, r)
  fi
}

inline kill_executor() {
  executor_alive = 0;
#if REMOTE
  if :: worker != W_IDLE -> zombie = 1 :: else -> skip fi;
#else
  worker = W_IDLE;
#endif
  do :: nempty(ereq) -> ereq?_ :: empty(ereq) -> break od;
  do :: nempty(erep) -> erep?_,_ :: empty(erep) -> break od;
  executor_alive = 1                           /* a fresh process, same ledger */
}

/* The report transaction, and the answer (or the lost-reply drill). */
inline retain_report(r) {
  if :: report == R_NONE -> report = r :: else -> skip fi;   /* insert-once */
  if
  :: !zombie && lost < MAX_LOST -> lost++; worker = W_IDLE; kill_executor()  /* --drop-reply: exit 75 */
  :: else -> worker_done(A_REPORT, report)
  fi
}

proctype Executor() {
  mtype:msg m;
end:
  do
  /* execute, step 2: look up before any window check (race H5) */
  :: atomic { worker == W_IDLE && ereq?[EXECUTE] -> ereq?m;
       if
       :: report != R_NONE -> answer(A_REPORT, report)
       :: report == R_NONE && refused -> answer(A_REFUSED, R_NONE)
       :: report == R_NONE && !refused && claimed -> answer(A_UNKNOWN, R_NONE)
#ifdef BROKEN_CLAIMTX
       :: report == R_NONE && !refused && !claimed && NOW == EXPIRED -> mark = NOW; answer(A_OUTSIDE, R_NONE)
       :: report == R_NONE && !refused && !claimed && NOW == INSIDE -> worker = W_LOOKED_UP
#else
       :: report == R_NONE && !refused && !claimed -> worker = W_LOOKED_UP
#endif
       fi }
  /* execute, step 3: the claim transaction re-reads and checks the window
   * against max(clock, mark), storing the mark first (races H2, H6) */
  :: atomic { worker == W_LOOKED_UP ->
#ifdef BROKEN_CLAIMTX
       claimed = 1; worker = W_CLAIMED
#else
       mark = NOW;
       if
       :: report != R_NONE || refused || claimed -> worker_done(A_UNKNOWN, R_NONE)
       :: else ->
            if
            :: NOW == EXPIRED -> worker_done(A_OUTSIDE, R_NONE)
            :: else -> claimed = 1; worker = W_CLAIMED
            fi
       fi
#endif
     }
  /* execute, step 4: the append, under the journal lock, refuses a fenced key (race H3) */
  :: atomic { worker == W_CLAIMED ->
#ifdef BROKEN_FENCE
       if :: skip fi;
#else
       if
       :: fenced -> worker = W_NOT_APPLIED
       :: else ->
#endif
            effects++; worker = W_APPLIED;
            /* at most one effect, and none after the kernel settled the
             * operation as having had none */
            assert(effects <= 1);
            assert(kst != K_RELEASED && kst != K_EXPIRED && kst != K_START_DENIED)
#ifndef BROKEN_FENCE
       fi
#endif
     }
  /* execute, step 5: sign and retain the report */
  :: atomic { worker == W_APPLIED -> retain_report(R_COMPLETED) }
  :: atomic { worker == W_NOT_APPLIED -> retain_report(R_FAILED) }
  /* reconcile_operation: never runs an effect (executor-proc/handlers/reconcile.ts) */
  :: atomic { ereq?[RECONCILE_OP] -> ereq?m;
       if
       :: report != R_NONE -> answer(A_REPORT, report)                 /* replay (race H5) */
       :: report == R_NONE && claimed ->
#if DURABLE
            if
            :: effects > 0 -> report = R_APPLIED
#ifdef BROKEN_FENCE
            :: effects == 0 -> report = R_NOT_APPLIED
#else
            :: effects == 0 -> fenced = 1; report = R_NOT_APPLIED    /* fence, then say so (race H3) */
#endif
            fi;
            answer(A_REPORT, report)
#else
            if
            :: effects > 0 -> report = R_APPLIED; answer(A_REPORT, report)
            :: else -> answer(A_INDETERMINATE, R_NONE)
            fi
#endif
       :: report == R_NONE && !claimed ->
            /* a refusal under the claims' unique key, never_claimed at once (race H4b) */
            refused = 1; report = R_NEVER; answer(A_REPORT, report)
       fi }
  od
}

/* ------------------------------------------------------------ supervisor */

inline move(p) { phase = p }

proctype Supervisor() {
  bool applied;
  mtype:msg a;
  mtype:rep r;
  byte failed_exchanges = 0;
end:
  do
  :: atomic { phase == P_RECEIVED || phase == P_RESERVED ->
       /* a new request: reserve alone (as any host may), or reserve_start (as the supervisor does) */
       if :: phase == P_RECEIVED -> if :: both = 0 :: both = 1 fi :: else -> both = 0 fi;
       kernel_call(phase, applied);
       if
       :: !applied -> skip                                            /* retry, same request id */
       :: applied && phase == P_RECEIVED && kst == K_DENIED -> move(P_REFUSED)
       :: applied && phase == P_RECEIVED && !both && kst != K_DENIED -> move(P_RESERVED)
       :: applied && phase == P_RECEIVED && both && (kst == K_START_DENIED || kst == K_EXPIRED) -> move(P_REFUSED)
       :: applied && phase == P_RECEIVED && both && kst != K_DENIED && kst != K_START_DENIED && kst != K_EXPIRED -> move(P_AUTHORIZED)
       :: applied && phase == P_RESERVED && (kst == K_START_DENIED || kst == K_EXPIRED) -> move(P_REFUSED)
       :: applied && phase == P_RESERVED && kst != K_START_DENIED && kst != K_EXPIRED -> move(P_AUTHORIZED)
       fi }
  /* executing is logged once the execute frame is written (supervisor/operations/executor-steps.ts) */
  :: atomic { phase == P_AUTHORIZED && empty(ereq) -> ereq!EXECUTE; move(P_EXECUTING) }
  :: atomic { phase == P_EXECUTING && nempty(erep) -> erep?a,r;
       if
       :: a == A_REPORT -> logged_report = r; move(P_REPORTED)
       :: else -> move(P_RECONCILING)          /* unknown, outside the window, refused: ask */
       fi }
  /* the watchdog: kill the group, reap, fresh session, one reconcile exchange */
  :: atomic { phase == P_EXECUTING && empty(erep) && watchdogs < MAX_WD ->
       watchdogs++; kill_executor(); move(P_RECONCILING) }
  /* the executor died under the request (crash, --drop-reply): its channel failed */
  :: atomic { phase == P_EXECUTING && empty(erep) && crashes < MAX_CRASH ->
       crashes++; kill_executor(); move(P_RECONCILING) }
  :: atomic { phase == P_RECONCILING && empty(ereq) && empty(erep) -> ereq!RECONCILE_OP }
  :: atomic { phase == P_RECONCILING && nempty(erep) -> erep?a,r;
       if
       :: a == A_REPORT -> logged_report = r; move(P_REPORTED)
       :: a == A_INDETERMINATE ->
            kernel_call(P_RECONCILING, applied)   /* mark_unknown; the hold stays; ask again */
       :: else -> skip
       fi }
  /* a reconcile exchange lost (the executor died in it): retried with backoff (race H4a) */
  :: atomic { phase == P_RECONCILING && nempty(ereq) && crashes < MAX_CRASH ->
       crashes++; kill_executor();
#ifdef BROKEN_RETRY
       failed_exchanges++;
       if :: failed_exchanges >= 1 -> move(P_SETTLED) :: else -> skip fi
#else
       skip
#endif
     }
  :: atomic { phase == P_REPORTED ->
       kernel_call(P_REPORTED, applied);
       if :: applied -> move(P_SETTLED) :: else -> skip fi }
  /* the supervisor itself dies: a new one kills its predecessor's children
   * and resumes from the log; an execute in doubt is only ever asked about */
  :: atomic { phase != P_SETTLED && phase != P_REFUSED && crashes < MAX_CRASH ->
       crashes++; kill_executor();
       if :: phase == P_EXECUTING -> move(P_RECONCILING) :: else -> skip fi }
  :: phase == P_SETTLED || phase == P_REFUSED -> break
  od
}

/* ----------------------------------------------------------- environment */

proctype Environment() {
end:
  do
  :: atomic { kst == K_RESERVED && !ttl_passed -> ttl_passed = 1 }
  :: atomic { clock == INSIDE -> clock = EXPIRED }
  :: atomic { clock == EXPIRED && backs < MAX_BACK -> backs++; clock = INSIDE }   /* stepped back */
  od
}

/* Done: a terminal state, or unknown with its claim listed for an operator. */
#define DONE (TERMINAL(kst) || (kst == K_UNKNOWN && claimed))
ltl live { <> DONE }

init {
  atomic {
    run Kernel();
    run Executor();
    run Supervisor();
    run Environment()
  }
}

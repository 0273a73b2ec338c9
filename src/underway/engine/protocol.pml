/*
 * The lease, fence, effect-ledger and group-commit protocol of underway's engine, in
 * Promela, checked with Spin by tests/integration/test_protocol_model.py (docs/protocol.md
 * says what is modelled, what each property means, the bounds, and how to run it).
 *
 * Runs live in the database: a journal (events at seqs 1..H), a row (lease owner, lease
 * token, lease expired or not, the status folded from the journal) and an inbox (the
 * signal a person or an operator sent). Workers claim a run (the token goes up), load the
 * journal, run its one step, and append batches of events fenced by token and head.
 * A worker's concurrent activations hand their batches to its group commit. The step
 * calls one non-idempotent tool: its intent is committed before the request is sent, its
 * outcome after. Run 0's tool has a reconcile hook and an outside system that checks the
 * fence; run 1's has neither, so its unknown outcome goes to a person. Anything may
 * happen between two of a worker's transitions: the worker dies (its activations are
 * gone, its requests may still land), a lease expires, a call times out, the step
 * raises (the run is dead-lettered, an operator resumes it), a request lands.
 *
 * Each place the code passes a fault point (underway.faults.POINTS) is marked
 * "fault point: <name>"; a worker may die there, as between any two of its transitions.
 *
 * Mutations (each must yield a counterexample; see the test):
 *   NO_TOKEN_FENCE    the append does not check the lease token;
 *   NO_FENCE          the append checks neither token nor head (nor a unique seq);
 *   INTENT_AFTER      the intent is committed with the outcome, after the effect;
 *   NO_OUTSIDE_FENCE  run 0's outside system ignores the fence (the known limit);
 *   GROUP_ONE_FENCE   a group's statement checks only its first batch's fence;
 *   DEAD_HOLD         a dead worker's leases never end.
 */

#ifndef NW
#define NW 2            /* workers */
#endif
#ifndef NR
#define NR 2            /* runs (1 or 2) */
#endif
#ifndef MAXCRASH
#define MAXCRASH 2      /* worker deaths, all workers together */
#endif
#ifndef MAXEXP
#define MAXEXP 1        /* leases expiring while held */
#endif
#ifndef MAXTO
#define MAXTO 1         /* tool calls timing out */
#endif
#ifndef MAXDEAD
#define MAXDEAD 1       /* steps raising (the run dead-lettered) */
#endif
#ifndef MAXHOOK
#define MAXHOOK 1       /* reconcile hooks that fail or cannot tell */
#endif
#ifndef MAXFAULTS
#define MAXFAULTS 2     /* all of the above together */
#endif
#ifndef PROPS
#define PROPS 15        /* which properties are asserted (bits below) */
#endif

#if NR > 2
#error "the model holds at most two runs"
#endif

#define P_EFFECT   1    /* no effect runs twice without a reconcile or a person */
#define P_WRITER   2    /* only the lease's holder commits */
#define P_LOST     4    /* no committed event is lost */
#define P_PROGRESS 8    /* every run finishes */
#define CHECK(p, c) if :: (PROPS & (p)) -> assert(c) :: else -> skip fi

#define MAXJ 16         /* journal slots per run (seq 1..MAXJ-1) */
#define BMAX 4          /* events in one batch */
#define FS 32           /* fence stride: fence = token * FS + seq (effects.fence_of) */
#define BOUND(c) assert(c)

/* Run 0's tool has a reconcile hook and its outside system refuses a lower fence. */
#define HOOK(r) ((r) == 0)
#ifdef NO_OUTSIDE_FENCE
#define OUTFENCE(r) false
#else
#define OUTFENCE(r) ((r) == 0)
#endif

/* Events of the journal. */
mtype = {
  RunStarted, ToolStarted, ToolSucceeded, ToolTimedOut, ToolReconciled, Escalated,
  ResolvedSucceeded, ResolvedRetry, RunDeadLettered, RunResumed, RunCompleted
}

/* A run's status, as folded from its journal. */
#define S_READY 0
#define S_ESC   1
#define S_DEAD  2
#define S_DONE  3
/* The call's status, as folded: no intent, intent without outcome, succeeded, may run. */
#define C_NONE    0
#define C_STARTED 1
#define C_OK      2
#define C_RETRY   3
/* An activation's phase. */
#define IDLE   0        /* none */
#define RUN    1        /* holds the run's state, decides its next move */
#define WAITC  2        /* its batch is in the group commit */
#define EXEC   3        /* intent committed, request not yet sent */
#define FLIGHT 4        /* request sent, no answer yet */
/* What an activation does once its batch commits. */
#define A_CONT    0
#define A_EXEC    1
#define A_RELEASE 2
/* A commit's or a request's answer. */
#define R_NONE    0
#define R_OK      1
#define R_REFUSED 2
/* Signals in a run's inbox. */
#define SIG_NONE   0
#define SIG_OK     1    /* resolve: succeeded */
#define SIG_RETRY  2    /* resolve: retry */
#define SIG_RESUME 3    /* resume a dead run */

/* ---- the database ---- */
byte token[NR];         /* lease token: bumped by every claim */
byte owner[NR];         /* lease owner: worker + 1, 0 for none */
bool expired[NR];       /* the lease's time is up (claimable by anyone) */
byte H[NR];             /* journal head */
mtype J[NR * MAXJ];     /* journal: J[r * MAXJ + seq] */
byte rstatus[NR];       /* the row's status, the journal folded */
byte inbox[NR];

/* ---- the outside world ---- */
byte execd[NR];         /* times run r's effect took place */
short maxfence[NR];     /* highest fence run r's outside system has seen */
chan wire[NR] = [4] of { short };   /* requests on their way, by fence */

/* ---- ghosts (for the properties) ---- */
byte holder[NR];        /* the activation that claimed run r last */
byte retries[NR];       /* a person's "retry", journaled */

/* ---- fault budgets ---- */
byte crashes, exps, touts, deads, hooks, faults;
#define FAULT_LEFT (faults < MAXFAULTS)

/* ---- the workers' memory (lost when one dies) ---- */
byte inc[NW];           /* the worker's incarnation */
byte ph[NW * NR];       /* activation of worker w on run r at w * NR + r */
byte st[NW * NR];
byte cs[NW * NR];
byte hd[NW * NR];       /* the head it appends after */
byte tk[NW * NR];       /* its lease token */
byte nb[NW * NR];
mtype buf[NW * NR * BMAX];
byte after[NW * NR];
byte res[NW * NR];
bool cons[NW * NR];     /* its batch consumes the inbox's signal */
short waitf[NW * NR];   /* the fence of the request it waits on */
bool gq[NW * NR];       /* its batch waits in the group commit */
bool fb[NW * NR];       /* its batch was in a refused group: appended alone next */

hidden byte k, e2, dummy, rr;

/* Witnesses: with -DWITNESSES each scenario below fails an assertion the first time it
   happens (a hidden variable is no part of a state, so it stays set for the rest of the
   search): a search with -c0 lists the scenarios the model reaches (the test asks for
   all), and checks the properties as ever. */
hidden byte reached_group_member_fenced, reached_group_rest_committed, reached_commit_refused,
            reached_outside_refused, reached_reconciled_rerun, reached_reconciled_happened,
            reached_hook_escalated, reached_person_licensed_rerun, reached_resume,
            reached_takeover;
#ifdef WITNESSES
#define SEEN(v) if :: v == 0 -> v = 1; assert(v == 0) :: else -> skip fi
#else
#define SEEN(v) skip
#endif
hidden byte fok, fok2;
hidden short f;

#define I(w, r) ((w) * NR + (r))
#define ACT(w) ((w) * 8 + inc[w] + 1)
#define BUSY(w) (ph[I(w, 0)] != IDLE || ph[I(w, NR - 1)] != IDLE)
#if NR == 1
#define ALLDONE (rstatus[0] == S_DONE)
#else
#define ALLDONE (rstatus[0] == S_DONE && rstatus[1] == S_DONE)
#endif

/* The fold: how each event changes a run's status and its call's. */
inline apply(e, s, c) {
  if
  :: e == ToolStarted -> c = C_STARTED
  :: e == ToolSucceeded -> c = C_OK
  :: e == ToolTimedOut -> c = C_STARTED        /* unknown outcome: as a crash leaves it */
  :: e == ToolReconciled -> c = C_RETRY        /* reconcile: it did not happen */
  :: e == Escalated -> s = S_ESC
  :: e == ResolvedSucceeded -> s = S_READY; c = C_OK
  :: e == ResolvedRetry -> s = S_READY; c = C_RETRY
  :: e == RunDeadLettered -> s = S_DEAD
  :: e == RunResumed -> s = S_READY
  :: e == RunCompleted -> s = S_DONE
  :: else -> skip
  fi
}

inline buffer(i, e) {
  BOUND(nb[i] < BMAX);
  buf[(i) * BMAX + nb[i]] = e;
  nb[i]++;
  apply(e, st[i], cs[i])
}

inline clearbuf(i) {
  k = 0;
  do
  :: k < BMAX -> buf[(i) * BMAX + k] = 0; k++
  :: else -> break
  od;
  nb[i] = 0
}

/* Forget an activation (a fenced commit, a lost lease, a dead worker). */
inline drop(i) {
  clearbuf(i);
  ph[i] = IDLE; st[i] = 0; cs[i] = 0; hd[i] = 0; tk[i] = 0; after[i] = 0;
  res[i] = R_NONE; cons[i] = false; waitf[i] = 0; gq[i] = false; fb[i] = false
}

/* The append's fence (append_events): the lease token, a holder, and the head. */
inline fence_ok(w, r, ok) {
#if defined(NO_FENCE)
  ok = true
#elif defined(NO_TOKEN_FENCE)
  ok = (owner[r] != 0 && H[r] == hd[I(w, r)])
#else
  ok = (owner[r] != 0 && token[r] == tk[I(w, r)] && H[r] == hd[I(w, r)])
#endif
}

/* The fenced batch's rows: its events, the row's status, the signal consumed, the lease
   released when the run leaves the worker (settle_run), all in the append's transaction. */
inline write(w, r) {
  printf("w%d commits %d events to run %d after seq %d (token %d, the run's %d)\n", w,
         nb[I(w, r)], r, hd[I(w, r)], tk[I(w, r)], token[r]);
  k = 0;
  do
  :: k < nb[I(w, r)] ->
     e2 = buf[I(w, r) * BMAX + k];
     BOUND(hd[I(w, r)] + 1 + k < MAXJ);
     CHECK(P_LOST, J[r * MAXJ + hd[I(w, r)] + 1 + k] == 0);
     J[r * MAXJ + hd[I(w, r)] + 1 + k] = e2;
     apply(e2, rstatus[r], dummy);
     if
     :: e2 == ResolvedRetry -> retries[r]++
     :: else -> skip
     fi;
     k++
  :: else -> break
  od;
  if
  :: hd[I(w, r)] + nb[I(w, r)] > H[r] -> H[r] = hd[I(w, r)] + nb[I(w, r)]
  :: else -> skip
  fi;
  CHECK(P_WRITER, holder[r] == ACT(w));
  if
  :: cons[I(w, r)] -> inbox[r] = SIG_NONE
  :: else -> skip
  fi;
  if
  :: after[I(w, r)] == A_RELEASE -> owner[r] = 0; expired[r] = false
  :: else -> skip
  fi;
  dummy = 0
}

/* One batch on its own: JournalStore.append. */
inline append_one(w, r) {
  fence_ok(w, r, fok);
  if
  :: fok ->
     if
     :: fb[I(w, r)] -> SEEN(reached_group_rest_committed)
     :: else -> skip
     fi;
     write(w, r); res[I(w, r)] = R_OK
  :: else ->
     SEEN(reached_commit_refused);
     printf("w%d: run %d's batch refused (token %d after seq %d; the run: token %d, head %d)\n",
            w, r, tk[I(w, r)], hd[I(w, r)], token[r], H[r]);
     res[I(w, r)] = R_REFUSED
  fi;
  gq[I(w, r)] = false;
  fb[I(w, r)] = false;
  fok = false
}

/* An activation hands its batch to the group commit. */
inline submit(i, a) {
  /* fault point: append.before_commit */
  after[i] = a;
  gq[i] = true;
  ph[i] = WAITC
}

/* ---- a worker's moves on run r ---- */

/* LeaseStore.claim (or claim_run): due, unfinished, held by nobody (an expired lease is
   nobody's); the token goes up. The activation loads the journal and folds it. */
inline claim(w, r) {
  d_step {
    ph[I(w, r)] == IDLE && rstatus[r] != S_DONE &&
    (rstatus[r] == S_READY || inbox[r] != SIG_NONE) &&
    (owner[r] == 0 || expired[r]) ->
    if
    :: owner[r] != 0 -> SEEN(reached_takeover)
    :: else -> skip
    fi;
    token[r]++; owner[r] = w + 1; expired[r] = false; holder[r] = ACT(w);
    printf("w%d claims run %d: token %d, head %d\n", w, r, token[r], H[r]);
    tk[I(w, r)] = token[r]; hd[I(w, r)] = H[r];
    st[I(w, r)] = S_READY; cs[I(w, r)] = C_NONE;
    k = 1;
    do
    :: k <= H[r] -> apply(J[r * MAXJ + k], st[I(w, r)], cs[I(w, r)]); k++
    :: else -> break
    od;
    ph[I(w, r)] = RUN
  }
}

/* The inbox: a person's resolution of an escalation, an operator's resume of a dead run,
   journaled by the activation, consumed with its next commit. */
inline read_inbox(w, r) {
  d_step {
    ph[I(w, r)] == RUN && !cons[I(w, r)] &&
    ((st[I(w, r)] == S_ESC && (inbox[r] == SIG_OK || inbox[r] == SIG_RETRY)) ||
        (st[I(w, r)] == S_DEAD && inbox[r] == SIG_RESUME)) ->
    cons[I(w, r)] = true;
    if
    :: inbox[r] == SIG_OK -> buffer(I(w, r), ResolvedSucceeded)
    :: inbox[r] == SIG_RETRY -> buffer(I(w, r), ResolvedRetry)
    :: inbox[r] == SIG_RESUME -> SEEN(reached_resume); buffer(I(w, r), RunResumed)
    fi
  }
}

/* Nothing to do: hand the run back (release_lease, token-checked). */
inline leave(w, r) {
  d_step {
    ph[I(w, r)] == RUN && nb[I(w, r)] == 0 && st[I(w, r)] != S_READY &&
    !(st[I(w, r)] == S_ESC && (inbox[r] == SIG_OK || inbox[r] == SIG_RETRY)) &&
    !(st[I(w, r)] == S_DEAD && inbox[r] == SIG_RESUME) ->
    if
    :: owner[r] == w + 1 && token[r] == tk[I(w, r)] -> owner[r] = 0; expired[r] = false
    :: else -> skip
    fi;
    drop(I(w, r))
  }
}

/* The step: it raises (dead-lettered), finishes with the call's result, goes through the
   door (intent first), or settles an intent without outcome. */
inline step(w, r) {
  if
  :: d_step {
       ph[I(w, r)] == RUN && st[I(w, r)] == S_READY && deads < MAXDEAD && FAULT_LEFT ->
       /* fault point: step.before_run */
       deads++; faults++;
       printf("w%d: run %d's step raises\n", w, r);
       buffer(I(w, r), RunDeadLettered);
       submit(I(w, r), A_RELEASE)
     }
  :: d_step {
       ph[I(w, r)] == RUN && st[I(w, r)] == S_READY && cs[I(w, r)] == C_OK ->
       /* fault point: step.before_run */
       buffer(I(w, r), RunCompleted);
       submit(I(w, r), A_RELEASE)
     }
  :: d_step {
       ph[I(w, r)] == RUN && st[I(w, r)] == S_READY &&
       (cs[I(w, r)] == C_NONE || cs[I(w, r)] == C_RETRY) ->
       /* fault point: step.before_run */
       /* The door: the intent (ToolStarted) with whatever is buffered. */
       buffer(I(w, r), ToolStarted);
#ifdef INTENT_AFTER
       ph[I(w, r)] = EXEC
#else
       submit(I(w, r), A_EXEC)
#endif
     }
  :: d_step {
       /* An intent without outcome, and a reconcile hook: ask it, with the fence of the
          next seq, so the outside system refuses the attempt in doubt from now on. */
       ph[I(w, r)] == RUN && st[I(w, r)] == S_READY && cs[I(w, r)] == C_STARTED &&
       HOOK(r) ->
       f = tk[I(w, r)] * FS + hd[I(w, r)] + nb[I(w, r)] + 1;
       if
       :: OUTFENCE(r) && f > maxfence[r] -> maxfence[r] = f
       :: else -> skip
       fi;
       if
       :: execd[r] > 0 ->
          SEEN(reached_reconciled_happened);
          printf("w%d asks run %d's reconcile hook (fence %d): happened\n", w, r, f);
          buffer(I(w, r), ToolSucceeded)
       :: else ->
          SEEN(reached_reconciled_rerun);
          printf("w%d asks run %d's reconcile hook (fence %d): not happened\n", w, r, f);
          buffer(I(w, r), ToolReconciled)
       fi;
       f = 0
     }
  :: d_step {
       /* The reconcile hook fails, does not answer in time, or cannot tell: a person
          decides (hooks.call_hook). */
       ph[I(w, r)] == RUN && st[I(w, r)] == S_READY && cs[I(w, r)] == C_STARTED &&
       HOOK(r) && hooks < MAXHOOK && FAULT_LEFT ->
       hooks++; faults++;
       printf("w%d: run %d's reconcile hook cannot tell\n", w, r);
       SEEN(reached_hook_escalated);
       buffer(I(w, r), Escalated);
       submit(I(w, r), A_RELEASE)
     }
  :: d_step {
       /* An intent without outcome and no reconcile hook: a person decides. */
       ph[I(w, r)] == RUN && st[I(w, r)] == S_READY && cs[I(w, r)] == C_STARTED &&
       !HOOK(r) ->
       printf("w%d: run %d's outcome is unknown: escalated\n", w, r);
       buffer(I(w, r), Escalated);
       submit(I(w, r), A_RELEASE)
     }
  fi
}

/* The effect: the request leaves with the call's fence (lease token, seq). */
inline execute(w, r) {
  d_step {
    ph[I(w, r)] == EXEC ->
    /* fault point: effect.before_run */
    f = tk[I(w, r)] * FS + hd[I(w, r)] + nb[I(w, r)];
    BOUND(len(wire[r]) < 4);
    wire[r]!f;
    printf("w%d sends run %d's request, fence %d\n", w, r, f);
    waitf[I(w, r)] = f;
    ph[I(w, r)] = FLIGHT;
    f = 0
  }
}

inline answered(w, r) {
  if
  :: d_step {
       ph[I(w, r)] == FLIGHT && res[I(w, r)] == R_OK ->
       /* fault point: effect.after_run */
       res[I(w, r)] = R_NONE; waitf[I(w, r)] = 0;
       buffer(I(w, r), ToolSucceeded);
       ph[I(w, r)] = RUN
     }
  :: d_step {
       /* The outside system refused the fence: only a worker that lost the lease. */
       ph[I(w, r)] == FLIGHT && res[I(w, r)] == R_REFUSED ->
       BOUND(tk[I(w, r)] != token[r]);
       drop(I(w, r))
     }
  :: d_step {
       /* Timed out (or the connection was lost after the request left, the answer with
          it): the outcome is unknown. */
       ph[I(w, r)] == FLIGHT && touts < MAXTO && FAULT_LEFT ->
       touts++; faults++;
       printf("w%d: run %d's call times out\n", w, r);
       res[I(w, r)] = R_NONE; waitf[I(w, r)] = 0;
       buffer(I(w, r), ToolTimedOut);
       ph[I(w, r)] = RUN
     }
  fi
}

/* The commit's answer reaches the activation. */
inline committed(w, r) {
  if
  :: d_step {
       ph[I(w, r)] == WAITC && res[I(w, r)] == R_OK ->
       /* fault point: append.after_commit */
       /* What the store said it committed is in the journal, where it said. */
       k = 0;
       do
       :: k < nb[I(w, r)] ->
          CHECK(P_LOST, J[r * MAXJ + hd[I(w, r)] + 1 + k] == buf[I(w, r) * BMAX + k]);
          k++
       :: else -> break
       od;
       hd[I(w, r)] = hd[I(w, r)] + nb[I(w, r)];
       clearbuf(I(w, r));
       cons[I(w, r)] = false;
       res[I(w, r)] = R_NONE;
       if
       :: after[I(w, r)] == A_CONT -> ph[I(w, r)] = RUN
       :: after[I(w, r)] == A_EXEC -> ph[I(w, r)] = EXEC
       :: after[I(w, r)] == A_RELEASE -> drop(I(w, r))
       fi;
       after[I(w, r)] = 0
     }
  :: d_step {
       /* Refused (FencedError, ConflictError): the run is another's; drop it. */
       ph[I(w, r)] == WAITC && res[I(w, r)] == R_REFUSED ->
       drop(I(w, r))
     }
  fi
}

/* The heartbeat: renews a lease still held (renew_lease: owner and token), and cancels
   the step of a lease lost. */
inline heartbeat(w, r) {
  if
  :: d_step {
       ph[I(w, r)] != IDLE && owner[r] == w + 1 && token[r] == tk[I(w, r)] &&
       expired[r] -> expired[r] = false
     }
  :: d_step {
       (ph[I(w, r)] == RUN || ph[I(w, r)] == EXEC || ph[I(w, r)] == FLIGHT) &&
       token[r] != tk[I(w, r)] -> drop(I(w, r))
     }
  fi
}

/* The group commit's writer (engine/_group.py, store append_many). */
inline group_one(w, r) {
  d_step {
    (fb[I(w, r)] || (gq[I(w, r)] && !fb[I(w, 0)] && !fb[I(w, NR - 1)])) ->
    /* fault point: group.before_commit (a lone batch) */
    append_one(w, r)
    /* fault point: group.after_commit */
  }
}

inline group_two(w) {
  d_step {
    gq[I(w, 0)] && gq[I(w, 1)] && !fb[I(w, 0)] && !fb[I(w, 1)] ->
    /* fault point: group.before_commit */
    /* One transaction (append_group): every batch's fence, then the events. */
    fence_ok(w, 0, fok);
#ifdef GROUP_ONE_FENCE
    fok2 = true;
#else
    fence_ok(w, 1, fok2);
#endif
    /* fault point: group.uncommitted (a death here commits nothing) */
    if
    :: fok && fok2 ->
       write(w, 0); write(w, 1);
       res[I(w, 0)] = R_OK; res[I(w, 1)] = R_OK;
       gq[I(w, 0)] = false; gq[I(w, 1)] = false
       /* fault point: group.after_commit */
    :: else ->
       /* A member is refused: nothing committed; each batch alone next, so the
          refused one is left out and the others commit. */
       if
       :: fok != fok2 -> SEEN(reached_group_member_fenced)
       :: else -> skip
       fi;
       printf("w%d: group refused (a member is fenced); each batch alone next\n", w);
       fb[I(w, 0)] = true; fb[I(w, 1)] = true;
       gq[I(w, 0)] = false; gq[I(w, 1)] = false
    fi;
    fok = false; fok2 = false
  }
}

/* A worker dies: its memory is gone, its requests on the wire may still land, its leases
   end (the restarted process's dead-holder check, or their time running out). */
inline die(w) {
  d_step {
    crashes < MAXCRASH && FAULT_LEFT && BUSY(w) ->
    crashes++; faults++;
    printf("w%d dies\n", w);
    rr = 0;
    do
    :: rr < NR ->
       if
       :: ph[I(w, rr)] != IDLE && owner[rr] == w + 1 && token[rr] == tk[I(w, rr)] ->
#ifndef DEAD_HOLD
          expired[rr] = true
#else
          skip
#endif
       :: else -> skip
       fi;
       drop(I(w, rr));
       rr++
    :: else -> break
    od;
    rr = 0;
    inc[w]++
  }
}

#define MOVES(w, r) \
  :: claim(w, r) \
  :: read_inbox(w, r) \
  :: leave(w, r) \
  :: step(w, r) \
  :: execute(w, r) \
  :: answered(w, r) \
  :: committed(w, r) \
  :: heartbeat(w, r) \
  :: group_one(w, r)

proctype Worker(byte w) {
end:
  do
  MOVES(w, 0)
#if NR > 1
  MOVES(w, 1)
  :: group_two(w)
#endif
  :: die(w)
  od
}

/* The world: leases expire, requests land, people answer. */
inline land(r) {
  d_step {
    wire[r]?f ->
    if
    :: !OUTFENCE(r) || f >= maxfence[r] ->
       if
       :: OUTFENCE(r) -> maxfence[r] = f
       :: else -> skip
       fi;
       CHECK(P_EFFECT, execd[r] < 1 + retries[r]);
       if
       :: execd[r] > 0 -> SEEN(reached_person_licensed_rerun)
       :: else -> skip
       fi;
       execd[r]++;
       printf("run %d's request with fence %d takes effect (%d times now)\n", r, f, execd[r]);
       rr = R_OK
    :: else ->
       SEEN(reached_outside_refused);
       printf("run %d's request with fence %d refused (seen %d)\n", r, f, maxfence[r]);
       rr = R_REFUSED
    fi;
    k = 0;
    do
    :: k < NW ->
       if
       :: waitf[I(k, r)] == f -> res[I(k, r)] = rr
       :: else -> skip
       fi;
       k++
    :: else -> break
    od;
    f = 0; rr = 0
  }
}

#define WORLD(r) \
  :: d_step { \
       exps < MAXEXP && FAULT_LEFT && owner[r] != 0 && !expired[r] -> \
       exps++; faults++; expired[r] = true; \
       printf("run %d's lease (token %d) expires\n", r, token[r]) } \
  :: land(r) \
  :: d_step { \
       rstatus[r] == S_ESC && inbox[r] == SIG_NONE -> inbox[r] = SIG_OK; \
       printf("a person resolves run %d: succeeded\n", r) } \
  :: d_step { \
       rstatus[r] == S_ESC && inbox[r] == SIG_NONE -> inbox[r] = SIG_RETRY; \
       printf("a person resolves run %d: retry\n", r) } \
  :: d_step { \
       rstatus[r] == S_DEAD && inbox[r] == SIG_NONE -> inbox[r] = SIG_RESUME; \
       printf("an operator resumes run %d\n", r) }

proctype World() {
end:
  do
  WORLD(0)
#if NR > 1
  WORLD(1)
#endif
  :: timeout ->
     /* Nothing can move: every run must have finished. */
     CHECK(P_PROGRESS, ALLDONE);
     break
  od
}

init {
  byte n;
  d_step {
    /* Run 0 started eagerly: created with its lease (start_leased), worker 0 holding it. */
    J[0 * MAXJ + 1] = RunStarted; H[0] = 1;
    token[0] = 1; owner[0] = 1; holder[0] = ACT(0);
    tk[I(0, 0)] = 1; hd[I(0, 0)] = 1; ph[I(0, 0)] = RUN
    /* fault point: start.eager_after_commit */
#if NR > 1
    ;
    /* Run 1 started plainly: due, held by nobody. */
    J[1 * MAXJ + 1] = RunStarted; H[1] = 1
#endif
  };
  atomic {
    do
    :: n < NW -> run Worker(n); n++
    :: else -> break
    od;
    run World()
  }
}

#ifdef LIVENESS
/* Every run finishes: on every execution, under weak fairness. */
ltl progress { <> ALLDONE }
#endif

-- Named queries for PostgreSQL. Every query on project tables takes the tenant, except the
-- scheduler's cross-tenant ones (claim, held leases, next wake-up, tenants) and queue limits.
-- Placeholders are psycopg's %(name)s, so a literal percent sign is written twice.
-- Run rows are always selected in the field order of RunRecord.

-- name: open_session
-- A new connection's first statement: the server's backend pid (a pooler in between hands
-- the client one of its own), and the schema set for the session, unless the pid must
-- match and does not (then nothing reaches a session other clients may share).
SELECT pg_backend_pid(),
       CASE WHEN %(path)s::text IS NOT NULL
             AND (NOT %(checked)s OR pg_backend_pid() = %(pid)s::int)
            THEN set_config('search_path', %(path)s::text, false) END

-- name: set_local_search_path
-- Behind a transaction pooler: the schema for the rest of this transaction only.
SELECT set_config('search_path', %(path)s, true)

-- name: migration_lock
SELECT pg_advisory_xact_lock(hashtext('underway.migrate:' || %(schema)s))

-- name: create_schema
CREATE SCHEMA IF NOT EXISTS {schema}

-- name: schema_version_table
CREATE TABLE IF NOT EXISTS underway_schema_version (
    version    integer          PRIMARY KEY,
    name       text             NOT NULL,
    applied_at double precision NOT NULL
)

-- name: schema_version
SELECT COALESCE(MAX(version), 0) FROM underway_schema_version

-- name: record_migration
INSERT INTO underway_schema_version (version, name, applied_at)
VALUES (%(version)s, %(name)s, %(applied_at)s)

-- name: create_run
WITH created AS (
    INSERT INTO runs (tenant_id, run_id, flow, status, step, idempotency_key, last_seq,
                      last_hash, next_wake_at, created_at, updated_at, queue, subject,
                      purpose)
    VALUES (%(tenant_id)s, %(run_id)s, %(flow)s, 'ready', %(step)s, %(idempotency_key)s,
            %(seq)s, %(hash)s::text, %(next_wake_at)s, %(now)s, %(now)s, %(queue)s, %(subject)s,
            %(purpose)s)
    ON CONFLICT DO NOTHING
    RETURNING tenant_id, run_id, flow, status, step, idempotency_key, last_seq, last_hash,
              next_wake_at, waiting_signal, control_pending, lease_owner, lease_token,
              lease_expires_at, created_at, updated_at, error, queue, subject, purpose,
       request_kind
), first_event AS (
    INSERT INTO events (tenant_id, run_id, seq, type, payload, hash)
    SELECT tenant_id, run_id, %(seq)s, %(type)s, %(payload)s, decode(%(hash)s::text, 'hex')
      FROM created
), first_blobs AS (
    INSERT INTO blobs (tenant_id, key, data, written_at)
    SELECT created.tenant_id, b.key, b.data, extract(epoch FROM clock_timestamp())
      FROM created, unnest(%(blob_keys)s::text[], %(blob_data)s::bytea[]) AS b(key, data)
     ORDER BY b.key
    ON CONFLICT (tenant_id, key) DO UPDATE SET written_at = excluded.written_at
     WHERE blobs.written_at < excluded.written_at - 86400
), first_labels AS (
    INSERT INTO run_labels (tenant_id, run_id, key, value, kind, sensitive)
    SELECT created.tenant_id, created.run_id, l.key, l.value, l.kind, l.sensitive
      FROM created, unnest(%(label_keys)s::text[], %(label_values)s::text[],
                           %(label_kinds)s::text[], %(label_sensitive)s::bool[])
                    AS l(key, value, kind, sensitive)
)
SELECT * FROM created

-- name: find_by_idempotency
SELECT tenant_id, run_id, flow, status, step, idempotency_key, last_seq, last_hash,
       next_wake_at, waiting_signal, control_pending, lease_owner, lease_token,
       lease_expires_at, created_at, updated_at, error, queue, subject, purpose,
       request_kind
  FROM runs
 WHERE tenant_id = %(tenant_id)s AND flow = %(flow)s AND idempotency_key = %(idempotency_key)s

-- name: get_run
SELECT tenant_id, run_id, flow, status, step, idempotency_key, last_seq, last_hash,
       next_wake_at, waiting_signal, control_pending, lease_owner, lease_token,
       lease_expires_at, created_at, updated_at, error, queue, subject, purpose,
       request_kind
  FROM runs
 WHERE tenant_id = %(tenant_id)s AND run_id = %(run_id)s

-- name: list_runs
-- A page of a tenant's runs, newest first, read in order from the listing index (0008)
-- from the cursor on: the time bounds are always given (infinite when not asked), so they
-- are a range of the index, and the page stops at the limit, however many runs the tenant
-- has. A status, a flow or both have their own query, each on an index in the same order:
-- this one with an equality on them, made by underway.store.queries (list_runs_by_*).
SELECT tenant_id, run_id, flow, status, step, idempotency_key, last_seq, last_hash,
       next_wake_at, waiting_signal, control_pending, lease_owner, lease_token,
       lease_expires_at, created_at, updated_at, error, queue, subject, purpose,
       request_kind
  FROM runs
 WHERE tenant_id = %(tenant_id)s
   AND created_at >= %(since)s::float8 AND created_at < %(until)s::float8
   AND created_at <= %(after_at)s::float8
   AND (created_at < %(after_at)s::float8
        OR (created_at = %(after_at)s::float8 AND run_id COLLATE "C" > %(after_id)s))
   AND (%(prefix)s::text IS NULL OR starts_with(run_id, %(prefix)s))
   AND (%(updated_since)s::float8 IS NULL OR updated_at >= %(updated_since)s)
   AND (%(updated_until)s::float8 IS NULL OR updated_at < %(updated_until)s)
   AND (%(search)s::text IS NULL OR strpos(run_id, %(search)s) > 0
        OR strpos(flow, %(search)s) > 0)
 ORDER BY created_at DESC, run_id COLLATE "C"
 LIMIT %(limit)s

-- name: list_runs_labelled
-- list_runs of the runs with every label asked, read from the (tenant, key, value) index:
-- the runs of the label with the fewest, each checked for the others on its primary key.
-- So a rare label never scans the tenant's runs, nor a common one's many entries.
WITH wanted AS MATERIALIZED (
    SELECT f.key, f.value
      FROM unnest(%(label_keys)s::text[], %(label_values)s::text[]) AS f(key, value)
), rarest AS MATERIALIZED (
    SELECT key, value FROM wanted
     ORDER BY (SELECT COUNT(*) FROM run_labels AS c
                WHERE c.tenant_id = %(tenant_id)s AND c.key = wanted.key
                  AND c.value = wanted.value)
     LIMIT 1
), matched AS MATERIALIZED (
    SELECT l.run_id FROM rarest JOIN run_labels AS l
        ON l.tenant_id = %(tenant_id)s AND l.key = rarest.key AND l.value = rarest.value
     WHERE (SELECT COUNT(*) FROM wanted JOIN run_labels AS m
              ON m.tenant_id = %(tenant_id)s AND m.run_id = l.run_id AND m.key = wanted.key
             AND m.value = wanted.value) = cardinality(%(label_keys)s::text[])
)
SELECT r.tenant_id, r.run_id, r.flow, r.status, r.step, r.idempotency_key, r.last_seq,
       r.last_hash, r.next_wake_at, r.waiting_signal, r.control_pending, r.lease_owner,
       r.lease_token, r.lease_expires_at, r.created_at, r.updated_at, r.error, r.queue,
       r.subject, r.purpose, r.request_kind
  FROM matched JOIN runs AS r ON r.tenant_id = %(tenant_id)s AND r.run_id = matched.run_id
 WHERE (%(status)s::text IS NULL OR r.status = %(status)s)
   AND (%(flow)s::text IS NULL OR r.flow = %(flow)s)
   AND (%(since)s::float8 IS NULL OR r.created_at >= %(since)s)
   AND (%(until)s::float8 IS NULL OR r.created_at < %(until)s)
   AND (%(after_at)s::float8 IS NULL OR r.created_at <= %(after_at)s)
   AND (%(after_at)s::float8 IS NULL OR r.created_at < %(after_at)s
        OR (r.created_at = %(after_at)s AND r.run_id COLLATE "C" > %(after_id)s))
   AND (%(prefix)s::text IS NULL OR starts_with(r.run_id, %(prefix)s))
   AND (%(updated_since)s::float8 IS NULL OR r.updated_at >= %(updated_since)s)
   AND (%(updated_until)s::float8 IS NULL OR r.updated_at < %(updated_until)s)
   AND (%(search)s::text IS NULL OR strpos(r.run_id, %(search)s) > 0
        OR strpos(r.flow, %(search)s) > 0)
 ORDER BY r.created_at DESC, r.run_id COLLATE "C"
 LIMIT %(limit)s

-- name: put_labels
-- Keys in one order, so two writers of one run's labels cannot deadlock.
INSERT INTO run_labels (tenant_id, run_id, key, value, kind, sensitive)
SELECT %(tenant_id)s, %(run_id)s, l.key, l.value, l.kind, l.sensitive
  FROM unnest(%(label_keys)s::text[], %(label_values)s::text[], %(label_kinds)s::text[],
              %(label_sensitive)s::bool[]) AS l(key, value, kind, sensitive)
 ORDER BY l.key
ON CONFLICT (tenant_id, run_id, key) DO UPDATE
   SET value = excluded.value, kind = excluded.kind, sensitive = excluded.sensitive

-- name: run_labels
SELECT run_id, key, value, kind, sensitive FROM run_labels
 WHERE tenant_id = %(tenant_id)s AND run_id = ANY(%(run_ids)s::text[])
 ORDER BY run_id COLLATE "C", key COLLATE "C"

-- name: delete_labels_of_run
DELETE FROM run_labels WHERE tenant_id = %(tenant_id)s AND run_id = %(run_id)s

-- name: runs_of_subject
SELECT tenant_id, run_id, flow, status, step, idempotency_key, last_seq, last_hash,
       next_wake_at, waiting_signal, control_pending, lease_owner, lease_token,
       lease_expires_at, created_at, updated_at, error, queue, subject, purpose,
       request_kind
  FROM runs
 WHERE tenant_id = %(tenant_id)s AND subject = %(subject)s
 ORDER BY created_at, run_id COLLATE "C"
 LIMIT %(limit)s

-- name: tenants
SELECT DISTINCT tenant_id COLLATE "C" AS tenant_id FROM runs ORDER BY 1

-- name: run_counts
-- The counts the runs' triggers keep (migration 0027), summed over their slots; the last
-- column is how many rows were summed.
SELECT tenant_id COLLATE "C" AS tenant_id, status COLLATE "C" AS status, SUM(n), COUNT(*)
  FROM run_counts GROUP BY 1, 2 HAVING SUM(n) <> 0 ORDER BY 1, 2

-- name: request_counts
-- Runs that wait for a person, from the counts the runs' triggers keep (migration 0027).
SELECT tenant_id COLLATE "C" AS tenant_id, kind COLLATE "C" AS kind, SUM(n) FROM run_counts
 WHERE kind <> '' AND status IN ('waiting', 'escalated')
 GROUP BY 1, 2 HAVING SUM(n) <> 0 ORDER BY 1, 2

-- name: run_counts_fold
-- The count rows of backends that are gone, and that no transaction holds, added to
-- their keys' slot 0 (one statement: a scrape that runs at the same time sees either).
WITH gone AS (
    DELETE FROM run_counts AS c
     WHERE c.slot <> 0
       AND c.slot NOT IN (SELECT pid FROM pg_stat_activity WHERE pid IS NOT NULL)
       AND (c.tenant_id, c.status, c.kind, c.slot) IN (
           SELECT tenant_id, status, kind, slot FROM run_counts
            WHERE slot <> 0 FOR UPDATE SKIP LOCKED)
    RETURNING c.tenant_id, c.status, c.kind, c.n)
INSERT INTO run_counts AS c (tenant_id, status, kind, slot, n)
SELECT tenant_id, status, kind, 0, SUM(n) FROM gone GROUP BY 1, 2, 3 ORDER BY 1, 2, 3
ON CONFLICT (tenant_id, status, kind, slot) DO UPDATE SET n = c.n + EXCLUDED.n

-- name: run_counts_drop_zeros
DELETE FROM run_counts WHERE slot = 0 AND n = 0

-- name: status_counts
-- Each status's runs counted up to the cap on the (tenant, status) index: a flat cost.
-- The index's order keeps the planner on it, even for a status no run has (a scan of the
-- table that stops at the cap would read every row for it).
SELECT s.status, (SELECT COUNT(*) FROM (SELECT 1 FROM runs
                                        WHERE tenant_id = %(tenant_id)s
                                          AND status = s.status
                                        ORDER BY created_at DESC
                                        LIMIT %(cap)s) AS capped)
  FROM unnest(%(statuses)s::text[]) AS s(status)

-- name: runs_created
SELECT floor((created_at - %(since)s::float8) / %(width)s::float8)::bigint AS bucket,
       status COLLATE "C" AS status, COUNT(*)
  FROM runs
 WHERE tenant_id = %(tenant_id)s AND created_at >= %(since)s AND created_at < %(until)s
 GROUP BY 1, 2 ORDER BY 1, 2

-- name: runs_written
SELECT run_id COLLATE "C" AS run_id FROM runs
 WHERE tenant_id = %(tenant_id)s AND updated_at >= %(since)s AND created_at < %(until)s
UNION
SELECT run_id COLLATE "C" FROM runs
 WHERE tenant_id = %(tenant_id)s AND lease_owner IS NOT NULL AND created_at < %(until)s
ORDER BY 1

-- name: events_by_type
SELECT run_id, seq, type, payload, encode(hash, 'hex') AS hash FROM events
 WHERE tenant_id = %(tenant_id)s AND run_id = ANY(%(runs)s) AND type = ANY(%(types)s)
 ORDER BY run_id COLLATE "C", seq

-- name: checkpoints_with_tails
-- Each run's checkpoint with the events from its seq on, in one statement (one snapshot).
-- LATERAL: each tail is a range of the events' primary key. As a join, the planner took seq
-- and run_id to be independent, guessed that a third of every journal lay past its
-- checkpoint, and hashed the tenant's whole events table to find a few rows.
SELECT c.run_id, c.seq, c.state, e.seq, e.type, e.payload, encode(e.hash, 'hex') AS hash
  FROM checkpoints c CROSS JOIN LATERAL (
        SELECT seq, type, payload, hash FROM events
         WHERE tenant_id = c.tenant_id AND run_id = c.run_id AND seq >= c.seq
         ORDER BY seq) AS e
 WHERE c.tenant_id = %(tenant_id)s AND c.run_id = ANY(%(runs)s)
 ORDER BY c.run_id COLLATE "C", e.seq

-- name: checkpoint_before
-- A run's newest checkpoint before the seq (the current one, or one it replaced, kept in
-- checkpoint_history by migration 0026) with the events from its seq through the seq;
-- the state on the first row only. The seq is found on the primary keys alone.
WITH found AS MATERIALIZED (
    SELECT max(seq) AS seq FROM (
        SELECT seq FROM checkpoints
         WHERE tenant_id = %(tenant_id)s AND run_id = %(run_id)s AND seq < %(seq)s
        UNION ALL
        SELECT max(seq) FROM checkpoint_history
         WHERE tenant_id = %(tenant_id)s AND run_id = %(run_id)s AND seq < %(seq)s) AS s
), c AS MATERIALIZED (
    (SELECT seq, state FROM checkpoints
      WHERE tenant_id = %(tenant_id)s AND run_id = %(run_id)s
        AND seq = (SELECT seq FROM found)
     UNION ALL
     SELECT seq, state FROM checkpoint_history
      WHERE tenant_id = %(tenant_id)s AND run_id = %(run_id)s
        AND seq = (SELECT seq FROM found))
    LIMIT 1
)
-- LATERAL: the events are an index range from the checkpoint's seq, never a scan from 1.
SELECT c.seq, CASE WHEN e.seq = c.seq THEN c.state END, e.seq, e.type, e.payload,
       encode(e.hash, 'hex') AS hash
  FROM c CROSS JOIN LATERAL (
        SELECT seq, type, payload, hash FROM events
         WHERE tenant_id = %(tenant_id)s AND run_id = %(run_id)s
           AND seq >= c.seq AND seq <= %(seq)s
         ORDER BY seq) AS e
 ORDER BY e.seq

-- name: fork_parent
-- What forking a run checks of its parent, its row locked for the fork's transaction: its
-- lease and its journal's head.
SELECT lease_owner, lease_expires_at,
       COALESCE((SELECT e.seq FROM events e
                  WHERE e.tenant_id = runs.tenant_id AND e.run_id = runs.run_id
                  ORDER BY e.seq DESC LIMIT 1), 0) AS last_seq
  FROM runs WHERE tenant_id = %(tenant_id)s AND run_id = %(run_id)s
   FOR NO KEY UPDATE

-- name: fork_append
-- The event a fork writes to its parent, and the parent row's head moved to it.
WITH appended AS (
    INSERT INTO events (tenant_id, run_id, seq, type, payload, hash)
    VALUES (%(tenant_id)s, %(run_id)s, %(seq)s, %(type)s, %(payload)s,
            decode(%(hash)s::text, 'hex'))
)
UPDATE runs SET last_seq = %(seq)s, last_hash = %(hash)s::text, updated_at = %(now)s
 WHERE tenant_id = %(tenant_id)s AND run_id = %(run_id)s

-- name: journal_heads
SELECT DISTINCT ON (tenant_id COLLATE "C", run_id COLLATE "C") tenant_id, run_id, seq,
       encode(hash, 'hex') AS hash
  FROM events
 WHERE %(tenant_id)s::text IS NULL OR tenant_id = %(tenant_id)s
 ORDER BY tenant_id COLLATE "C", run_id COLLATE "C", seq DESC

-- name: journaled_runs
SELECT tenant_id COLLATE "C", run_id COLLATE "C" FROM runs
 WHERE %(tenant_id)s::text IS NULL OR tenant_id = %(tenant_id)s
UNION
SELECT DISTINCT tenant_id COLLATE "C", run_id COLLATE "C" FROM events
 WHERE %(tenant_id)s::text IS NULL OR tenant_id = %(tenant_id)s
ORDER BY 1, 2

-- name: append_events
-- The fence and the events in one statement. The run row is locked (FOR NO KEY UPDATE: a
-- lock, not a new row version), so a claim bumping the lease token, or a second writer,
-- either waits for this transaction or is seen by it; the journal's own head is the
-- sequence check, backed by its primary key. The head is the last key of the run's range
-- (ORDER BY seq DESC LIMIT 1), one probe: a MAX(seq) planned without statistics walked the
-- whole journal, 30,000 events read on every append of a 30,000-event run. When either
-- refuses, the events take their
-- tenant and run from the empty fence, violate NOT NULL, and the error aborts the whole
-- pipelined transaction before anything after it runs.
WITH fence AS (
    SELECT tenant_id, run_id, control_pending FROM runs
     WHERE tenant_id = %(tenant_id)s AND run_id = %(run_id)s
       AND lease_token = %(fence)s AND lease_owner IS NOT NULL
       AND COALESCE((SELECT seq FROM events
                      WHERE tenant_id = %(tenant_id)s AND run_id = %(run_id)s
                      ORDER BY seq DESC LIMIT 1), 0) = %(expected_seq)s
       FOR NO KEY UPDATE
), appended AS (
    INSERT INTO events (tenant_id, run_id, seq, type, payload, hash)
    SELECT fence.tenant_id, fence.run_id, e.seq, e.type, e.payload, decode(e.hash, 'hex')
      FROM unnest(%(seqs)s::bigint[], %(types)s::text[], %(payloads)s::bytea[],
                  %(hashes)s::text[]) AS e(seq, type, payload, hash)
      LEFT JOIN fence ON true
)
SELECT control_pending FROM fence

-- name: advance_run
-- The run row follows the journal when the run changes status or is handed back.
UPDATE runs
   SET last_seq = %(last_seq)s, last_hash = %(last_hash)s, status = %(status)s,
       step = %(step)s, next_wake_at = %(next_wake_at)s,
       waiting_signal = %(waiting_signal)s, error = %(error)s,
       request_kind = %(request_kind)s, updated_at = %(now)s
 WHERE tenant_id = %(tenant_id)s AND run_id = %(run_id)s

-- name: append_group
-- append_events for the plain batches of a group commit, in one statement: every batch's
-- fence, then all their events. The runs are locked in (tenant, run) order, as every
-- writer locks them. When any batch is refused its events take their tenant and run from
-- the missing fence row, violate NOT NULL and abort the whole transaction; the batches are
-- then appended one by one.
WITH b AS (
    SELECT * FROM unnest(%(tenant_ids)s::text[], %(run_ids)s::text[],
                         %(expected_seqs)s::bigint[], %(fences)s::bigint[])
                  WITH ORDINALITY AS b(tenant_id, run_id, expected_seq, fence, i)
), fence AS (
    SELECT r.tenant_id, r.run_id, r.control_pending, b.i
      FROM b JOIN runs AS r ON r.tenant_id = b.tenant_id AND r.run_id = b.run_id
     WHERE r.lease_token = b.fence AND r.lease_owner IS NOT NULL
       AND COALESCE((SELECT seq FROM events
                      WHERE tenant_id = b.tenant_id AND run_id = b.run_id
                      ORDER BY seq DESC LIMIT 1), 0) = b.expected_seq
     ORDER BY r.tenant_id, r.run_id
       FOR NO KEY UPDATE OF r
), appended AS (
    INSERT INTO events (tenant_id, run_id, seq, type, payload, hash)
    SELECT fence.tenant_id, fence.run_id, e.seq, e.type, e.payload, decode(e.hash, 'hex')
      FROM unnest(%(batch_of)s::bigint[], %(seqs)s::bigint[], %(types)s::text[],
                  %(payloads)s::bytea[], %(hashes)s::text[])
           AS e(i, seq, type, payload, hash)
      LEFT JOIN fence ON fence.i = e.i
)
SELECT i, control_pending FROM fence

-- name: advance_runs
-- advance_run for the batches of a group commit, in one statement (their rows are already
-- locked by their append_events, earlier in the same transaction).
UPDATE runs
   SET last_seq = u.last_seq, last_hash = u.last_hash, status = u.status, step = u.step,
       next_wake_at = u.next_wake_at, waiting_signal = u.waiting_signal, error = u.error,
       request_kind = u.request_kind, updated_at = u.now
  FROM unnest(%(tenant_ids)s::text[], %(run_ids)s::text[], %(last_seqs)s::bigint[],
              %(last_hashes)s::text[], %(statuses)s::text[], %(steps)s::text[],
              %(next_wake_ats)s::float8[], %(waiting_signals)s::text[], %(errors)s::text[],
              %(request_kinds)s::text[], %(nows)s::float8[])
       AS u(tenant_id, run_id, last_seq, last_hash, status, step, next_wake_at,
            waiting_signal, error, request_kind, now)
 WHERE runs.tenant_id = u.tenant_id AND runs.run_id = u.run_id

-- name: upsert_checkpoints
-- upsert_checkpoint for the batches of a group commit, in one statement, in the order
-- of their runs.
INSERT INTO checkpoints (tenant_id, run_id, seq, state)
SELECT c.tenant_id, c.run_id, c.seq, c.state
  FROM unnest(%(tenant_ids)s::text[], %(run_ids)s::text[], %(seqs)s::bigint[],
              %(states)s::bytea[]) AS c(tenant_id, run_id, seq, state)
 ORDER BY c.tenant_id, c.run_id
ON CONFLICT (tenant_id, run_id) DO UPDATE SET seq = excluded.seq, state = excluded.state

-- name: last_seq
SELECT COALESCE((SELECT seq FROM events
                  WHERE tenant_id = %(tenant_id)s AND run_id = %(run_id)s
                  ORDER BY seq DESC LIMIT 1), 0)

-- name: insert_blobs
-- Keys in one order everywhere, so two writers sharing blobs cannot deadlock. written_at
-- by the database's clock; a blob sent again is marked written again only when its mark
-- is over a day old (BLOB_REFRESH), so a resend rarely rewrites the row.
INSERT INTO blobs (tenant_id, key, data, written_at)
SELECT %(tenant_id)s, b.key, b.data, extract(epoch FROM clock_timestamp())
  FROM unnest(%(keys)s::text[], %(data)s::bytea[]) AS b(key, data)
 ORDER BY b.key
ON CONFLICT (tenant_id, key) DO UPDATE SET written_at = excluded.written_at
 WHERE blobs.written_at < excluded.written_at - 86400

-- name: upsert_checkpoint
INSERT INTO checkpoints (tenant_id, run_id, seq, state)
VALUES (%(tenant_id)s, %(run_id)s, %(seq)s, %(state)s)
ON CONFLICT (tenant_id, run_id) DO UPDATE SET seq = excluded.seq, state = excluded.state

-- name: consume_signal
-- One signal by its whole primary key: a probe whatever the planner knows of the table (an
-- array of ids let a plan made before any statistics walk every signal of the run).
UPDATE signals SET consumed = true
 WHERE tenant_id = %(tenant_id)s AND run_id = %(run_id)s AND signal_id = %(signal_id)s

-- name: settle_run
-- After an append: refresh control_pending once control signals were consumed, wake a run
-- that now waits for a signal already in its inbox, and let the lease go. A statement of
-- its own, so it sees every signal committed while the append held the run's row lock.
-- Each look into the inbox asks for the oldest row in the order of its partial index
-- (0023): an EXISTS would let the planner bet on a scan that stops at the first match, and
-- walk every signal the run consumed, or every one it leaves unread.
UPDATE runs
   SET control_pending = CASE
           WHEN %(consumed)s AND control_pending THEN (
               SELECT true FROM signals s
                WHERE s.tenant_id = runs.tenant_id AND s.run_id = runs.run_id
                  AND NOT s.consumed AND s.name LIKE 'underway.%%'
                ORDER BY s.created_at, s.signal_id COLLATE "C" LIMIT 1) IS NOT NULL
           ELSE control_pending END,
       next_wake_at = CASE
           WHEN status IN ('completed', 'failed', 'cancelled') THEN next_wake_at
           WHEN waiting_signal IS NOT NULL AND (
               SELECT true FROM signals s
                WHERE s.tenant_id = runs.tenant_id AND s.run_id = runs.run_id
                  AND NOT s.consumed AND s.name = runs.waiting_signal
                ORDER BY s.created_at, s.signal_id COLLATE "C" LIMIT 1) IS NOT NULL
           THEN %(now)s
           -- A control signal (cancel, resolve) that arrived while the step ran must not
           -- wait for the run's timer once the run is handed back.
           WHEN %(release)s AND (
               SELECT true FROM signals s
                WHERE s.tenant_id = runs.tenant_id AND s.run_id = runs.run_id
                  AND NOT s.consumed AND s.name LIKE 'underway.%%'
                ORDER BY s.created_at, s.signal_id COLLATE "C" LIMIT 1) IS NOT NULL
           THEN %(now)s
           ELSE next_wake_at END,
       lease_owner = CASE WHEN %(release)s THEN NULL ELSE lease_owner END,
       lease_expires_at = CASE WHEN %(release)s THEN NULL ELSE lease_expires_at END
 WHERE tenant_id = %(tenant_id)s AND run_id = %(run_id)s
RETURNING control_pending

-- name: load_checkpoint
SELECT seq, state FROM checkpoints WHERE tenant_id = %(tenant_id)s AND run_id = %(run_id)s

-- name: delete_checkpoints_of_run
DELETE FROM checkpoints WHERE tenant_id = %(tenant_id)s AND run_id = %(run_id)s

-- name: delete_checkpoints_of_tenant
DELETE FROM checkpoints WHERE tenant_id = %(tenant_id)s

-- name: kept_checkpoints
-- A run's checkpoints a newer one replaced (migration 0026), oldest first: the blob
-- collector follows what they refer to.
SELECT seq, state FROM checkpoint_history
 WHERE tenant_id = %(tenant_id)s AND run_id = %(run_id)s ORDER BY seq

-- name: load_events
-- A page of a run's events after a seq, read in the primary key's order. The LIMIT keeps the
-- plan on that index: the planner takes seq and run_id to be independent, so where another
-- run's journal is longer it guesses that half this run's events lie past a checkpoint near
-- its head, and without a LIMIT it scanned the whole table (in parallel) for one row.
SELECT seq, type, payload, encode(hash, 'hex') AS hash FROM events
 WHERE tenant_id = %(tenant_id)s AND run_id = %(run_id)s AND seq > %(after_seq)s
 ORDER BY seq LIMIT %(page)s

-- name: queue_limits
-- The limits of the queues a claim may take runs from (every queue when none are named).
-- FOR UPDATE: claims on a limited queue take turns, so each counts the leases and tokens
-- the one before it took; a queue without limits has no row here and never waits.
SELECT name, max_concurrency, rate_limit, rate_period_s, per_tenant FROM queues
 WHERE (%(queues)s::text[] IS NULL OR name = ANY(%(queues)s::text[]))
   AND (max_concurrency IS NOT NULL OR rate_limit IS NOT NULL)
 ORDER BY name COLLATE "C"
   FOR UPDATE

-- name: leased_per_queue
SELECT queue, count(*) FROM runs
 WHERE queue = ANY(%(queues)s::text[])
   AND lease_owner IS NOT NULL AND lease_expires_at >= %(now)s
 GROUP BY queue

-- name: queue_buckets
SELECT queue, tenant_id, tokens, updated_at FROM queue_buckets
 WHERE queue = ANY(%(queues)s::text[])

-- name: claim_candidates
-- Due runs nobody holds, in tenant-fair order: every tenant's first turn, then every
-- tenant's second, and so on, where the runs a tenant already has in flight count as turns
-- taken; so one tenant's backlog cannot starve another, even when claims take one run at
-- a time and the backlog is older than the other tenant's runs. The pairs walk visits
-- each (queue, tenant) with scheduled runs once, by index, and reads only its first
-- %(window)s due runs (a claim for n runs takes at most n of one tenant; the rest is slack
-- for rows other claimers are locking), so the cost does not grow with a tenant's backlog.
-- Queues at their concurrency limit, and first activations (lease_token 0) whose rate
-- bucket is empty, are left out. Locked rows are skipped (the lock sits below the LIMIT,
-- so they do not count against it); a row whose lease was taken after this statement's
-- snapshot fails the re-checked conditions on r.
-- The candidates are sorted first, then each is found on the primary key and locked, in
-- order, until the LIMIT is met: a handful of probes. As a join, the planner hashed every
-- due run of the table to find them (10,000 ready runs of a million: 450 pages a claim
-- against 130 at 10,000 runs), or probed and locked every candidate before sorting.
WITH RECURSIVE pairs AS (
    (SELECT queue, tenant_id FROM runs
      WHERE next_wake_at IS NOT NULL
      ORDER BY queue, tenant_id LIMIT 1)
    UNION ALL
    SELECT nxt.queue, nxt.tenant_id FROM pairs p, LATERAL (
        SELECT queue, tenant_id FROM runs
         WHERE next_wake_at IS NOT NULL AND (queue, tenant_id) > (p.queue, p.tenant_id)
         ORDER BY queue, tenant_id LIMIT 1) nxt
), flying AS (
    SELECT tenant_id, count(*) AS runs FROM runs
     WHERE lease_owner IS NOT NULL AND lease_expires_at >= %(now)s
       AND (%(queues)s::text[] IS NULL OR queue = ANY(%(queues)s::text[]))
     GROUP BY tenant_id
), due AS MATERIALIZED (
    SELECT d.tenant_id, d.run_id, d.next_wake_at,
           row_number() OVER (PARTITION BY d.tenant_id
                              ORDER BY d.next_wake_at, d.run_id COLLATE "C")
           + COALESCE(f.runs, 0) AS turn
      FROM pairs p CROSS JOIN LATERAL (
        SELECT tenant_id, run_id, next_wake_at FROM runs
         WHERE queue = p.queue AND tenant_id = p.tenant_id AND next_wake_at <= %(now)s
           AND status NOT IN ('completed', 'failed', 'cancelled')
           AND (lease_owner IS NULL OR lease_expires_at < %(now)s)
           AND (%(run_id)s::text IS NULL OR run_id = %(run_id)s::text)
           AND NOT (lease_token = 0 AND EXISTS (
                   SELECT 1 FROM unnest(%(empty_queues)s::text[], %(empty_tenants)s::text[])
                              AS e(queue, tenant_id)
                    WHERE e.queue = p.queue AND e.tenant_id IN ('*', p.tenant_id)))
         ORDER BY next_wake_at LIMIT %(window)s) d
      LEFT JOIN flying f ON f.tenant_id = d.tenant_id
     WHERE (%(queues)s::text[] IS NULL OR p.queue = ANY(%(queues)s::text[]))
       AND NOT p.queue = ANY(%(full)s::text[])
       AND (%(tenant_id)s::text IS NULL OR p.tenant_id = %(tenant_id)s::text)
)
SELECT r.tenant_id, r.run_id, r.queue, r.lease_token
  FROM (SELECT * FROM due
         ORDER BY turn, next_wake_at, tenant_id COLLATE "C", run_id COLLATE "C") d
 CROSS JOIN LATERAL (
        SELECT tenant_id, run_id, queue, lease_token FROM runs
         WHERE tenant_id = d.tenant_id AND run_id = d.run_id AND next_wake_at <= %(now)s
           AND status NOT IN ('completed', 'failed', 'cancelled')
           AND (lease_owner IS NULL OR lease_expires_at < %(now)s)
           FOR UPDATE SKIP LOCKED) r
 ORDER BY d.turn, d.next_wake_at, d.tenant_id COLLATE "C", d.run_id COLLATE "C"
 LIMIT %(limit)s

-- name: queues_limited
-- Whether a queue a claim may take runs from has limits (every queue when none are named).
SELECT EXISTS (SELECT 1 FROM queues
                WHERE (%(queues)s::text[] IS NULL OR name = ANY(%(queues)s::text[]))
                  AND (max_concurrency IS NOT NULL OR rate_limit IS NOT NULL))

-- name: claim_unlimited
-- A claim on queues without limits, in one statement: the runs claim_candidates finds,
-- leased as take_leases leases them, numbered in the candidates' order. Nothing is taken
-- when a queue of the claim has limits (queues_limited, sent with it, says so); the
-- caller then claims within them. One round trip instead of a transaction of four: a
-- claim's locks are never held while a busy worker process waits for its turn to run.
WITH picked AS MATERIALIZED (
    SELECT c.tenant_id, c.run_id, row_number() OVER () AS n FROM (
-- include: claim_candidates
    ) c
     WHERE NOT EXISTS (
           SELECT 1 FROM queues
            WHERE (%(queues)s::text[] IS NULL OR name = ANY(%(queues)s::text[]))
              AND (max_concurrency IS NOT NULL OR rate_limit IS NOT NULL))
)
UPDATE runs
   SET lease_owner = %(owner)s, lease_token = runs.lease_token + 1,
       lease_expires_at = %(expires_at)s
  FROM picked
 WHERE runs.tenant_id = picked.tenant_id AND runs.run_id = picked.run_id
RETURNING runs.tenant_id, runs.run_id, runs.lease_token, picked.n

-- name: claim_run
-- A claim told which run to take: the run's row, found by its key and leased when it is
-- due, unfinished, held by nobody, of the queues and its queue has no limits; one statement
-- instead of the tenant-fair search (a run of a limited queue is left to that search). A row another worker is locking is waited
-- for, then checked again (READ COMMITTED), so a lease taken meanwhile is not taken twice.
UPDATE runs
   SET lease_owner = %(owner)s, lease_token = runs.lease_token + 1,
       lease_expires_at = %(expires_at)s
 WHERE tenant_id = %(tenant_id)s AND run_id = %(run_id)s AND next_wake_at <= %(now)s
   AND status NOT IN ('completed', 'failed', 'cancelled')
   AND (lease_owner IS NULL OR lease_expires_at < %(now)s)
   AND (%(queues)s::text[] IS NULL OR queue = ANY(%(queues)s::text[]))
   AND NOT EXISTS (SELECT 1 FROM queues AS q WHERE q.name = runs.queue
                     AND (q.max_concurrency IS NOT NULL OR q.rate_limit IS NOT NULL))
RETURNING lease_token

-- name: take_leases
UPDATE runs
   SET lease_owner = %(owner)s, lease_token = runs.lease_token + 1,
       lease_expires_at = %(expires_at)s
  FROM unnest(%(tenant_ids)s::text[], %(run_ids)s::text[]) AS t(tenant_id, run_id)
 WHERE runs.tenant_id = t.tenant_id AND runs.run_id = t.run_id
RETURNING runs.tenant_id, runs.run_id, runs.lease_token

-- name: lease_started_by_id
-- An eager start's lease, in the start's transaction: the run it just created (its first
-- event's hash tells it from a run that had the id already) leased as a claim would lease
-- it — when it is due, unfinished, held by nobody, of the queues, and its queue has no
-- limits (else the caller applies them, then asks again with limits_checked). Returns the
-- leased row and whether signals wait in its inbox.
UPDATE runs
   SET lease_owner = %(owner)s, lease_token = runs.lease_token + 1,
       lease_expires_at = %(expires_at)s
 WHERE tenant_id = %(tenant_id)s AND run_id = %(run_id)s
   AND last_seq = %(seq)s AND last_hash = %(hash)s
   AND next_wake_at <= %(now)s AND status NOT IN ('completed', 'failed', 'cancelled')
   AND (lease_owner IS NULL OR lease_expires_at < %(now)s)
   AND (%(queues)s::text[] IS NULL OR queue = ANY(%(queues)s::text[]))
   AND (%(limits_checked)s OR NOT EXISTS (
        SELECT 1 FROM queues AS q WHERE q.name = runs.queue
           AND (q.max_concurrency IS NOT NULL OR q.rate_limit IS NOT NULL)))
RETURNING tenant_id, run_id, flow, status, step, idempotency_key, last_seq, last_hash,
          next_wake_at, waiting_signal, control_pending, lease_owner, lease_token,
          lease_expires_at, created_at, updated_at, error, queue, subject, purpose,
          request_kind,
          (SELECT true FROM signals AS s
            WHERE s.tenant_id = runs.tenant_id AND s.run_id = runs.run_id AND NOT s.consumed
            ORDER BY s.name, s.created_at, s.signal_id COLLATE "C" LIMIT 1) IS NOT NULL

-- name: lease_started_by_key
-- The same for a start with an idempotency key: the run it created or found by the key.
UPDATE runs
   SET lease_owner = %(owner)s, lease_token = runs.lease_token + 1,
       lease_expires_at = %(expires_at)s
 WHERE tenant_id = %(tenant_id)s AND flow = %(flow)s
   AND idempotency_key IS NOT NULL AND idempotency_key = %(idempotency_key)s
   AND next_wake_at <= %(now)s AND status NOT IN ('completed', 'failed', 'cancelled')
   AND (lease_owner IS NULL OR lease_expires_at < %(now)s)
   AND (%(queues)s::text[] IS NULL OR queue = ANY(%(queues)s::text[]))
   AND (%(limits_checked)s OR NOT EXISTS (
        SELECT 1 FROM queues AS q WHERE q.name = runs.queue
           AND (q.max_concurrency IS NOT NULL OR q.rate_limit IS NOT NULL)))
RETURNING tenant_id, run_id, flow, status, step, idempotency_key, last_seq, last_hash,
          next_wake_at, waiting_signal, control_pending, lease_owner, lease_token,
          lease_expires_at, created_at, updated_at, error, queue, subject, purpose,
          request_kind,
          (SELECT true FROM signals AS s
            WHERE s.tenant_id = runs.tenant_id AND s.run_id = runs.run_id AND NOT s.consumed
            ORDER BY s.name, s.created_at, s.signal_id COLLATE "C" LIMIT 1) IS NOT NULL

-- name: put_buckets
INSERT INTO queue_buckets (queue, tenant_id, tokens, updated_at)
SELECT b.queue, b.tenant_id, b.tokens, %(now)s
  FROM unnest(%(queues)s::text[], %(tenant_ids)s::text[], %(tokens)s::float8[])
       AS b(queue, tenant_id, tokens)
ON CONFLICT (queue, tenant_id) DO UPDATE
   SET tokens = excluded.tokens, updated_at = excluded.updated_at

-- name: next_due_at
-- NaN and infinities are nobody's next wake-up: the worker's row check heals them from the
-- journal (underway.projection).
SELECT MIN(next_wake_at) FROM runs
 WHERE next_wake_at IS NOT NULL AND status NOT IN ('completed', 'failed', 'cancelled')
   AND next_wake_at > '-Infinity' AND next_wake_at < 'Infinity'
   AND (lease_owner IS NULL OR lease_expires_at < %(now)s)
   AND (%(queues)s::text[] IS NULL OR queue = ANY(%(queues)s::text[]))

-- name: set_queue
INSERT INTO queues (name, max_concurrency, rate_limit, rate_period_s, per_tenant, updated_at)
VALUES (%(name)s, %(max_concurrency)s, %(rate_limit)s, %(rate_period_s)s, %(per_tenant)s,
        %(now)s)
ON CONFLICT (name) DO UPDATE
   SET max_concurrency = excluded.max_concurrency, rate_limit = excluded.rate_limit,
       rate_period_s = excluded.rate_period_s, per_tenant = excluded.per_tenant,
       updated_at = excluded.updated_at

-- name: reset_queue_buckets
DELETE FROM queue_buckets WHERE queue = %(name)s

-- name: list_queues
SELECT name, max_concurrency, rate_limit, rate_period_s, per_tenant FROM queues
 ORDER BY name COLLATE "C"

-- name: delete_queue
DELETE FROM queues WHERE name = %(name)s

-- name: wake_channel
-- The channel idle workers of a schema listen on; the payload of a notification is a queue
-- name. A channel belongs to the database, not the schema: one per schema, so workers of
-- one schema are not woken by another's runs (named by a digest: a channel name is at
-- most 63 bytes, a schema's name need not be).
SELECT 'underway_' || left(md5(coalesce(%(schema)s::text, current_schema(), '')), 16)

-- name: notify_run
-- Sent in the transaction that creates a run or signals it, so workers learn of it when
-- (and only if) it commits; a worker serving the run's queue then claims or re-plans its
-- sleep. Spurious wake-ups cost one claim, so this does not check whether the run is due.
SELECT pg_notify('underway_' || left(md5(coalesce(current_schema(), '')), 16), queue)
  FROM runs
 WHERE tenant_id = %(tenant_id)s AND run_id = %(run_id)s

-- name: notify_queues
SELECT pg_notify('underway_' || left(md5(coalesce(current_schema(), '')), 16), q)
  FROM unnest(%(queues)s::text[]) AS q

-- name: renew_lease
UPDATE runs SET lease_expires_at = %(expires_at)s
 WHERE tenant_id = %(tenant_id)s AND run_id = %(run_id)s
   AND lease_owner = %(owner)s AND lease_token = %(token)s

-- name: release_lease
UPDATE runs SET lease_owner = NULL, lease_expires_at = NULL
 WHERE tenant_id = %(tenant_id)s AND run_id = %(run_id)s
   AND lease_owner = %(owner)s AND lease_token = %(token)s

-- name: release_lease_until
-- A run handed back after a failure is not due again before retry_at: never claimed in
-- a loop.
UPDATE runs SET lease_owner = NULL, lease_expires_at = NULL,
       next_wake_at = GREATEST(COALESCE(next_wake_at, %(retry_at)s), %(retry_at)s)
 WHERE tenant_id = %(tenant_id)s AND run_id = %(run_id)s
   AND lease_owner = %(owner)s AND lease_token = %(token)s

-- name: lock_run
-- Serializes a signal with an append to the same run: whichever commits second sees the
-- other's row, so a signal sent just as the run starts waiting is never lost.
SELECT 1 FROM runs WHERE tenant_id = %(tenant_id)s AND run_id = %(run_id)s
   FOR NO KEY UPDATE

-- name: send_signal
WITH sent AS (
    INSERT INTO signals (tenant_id, run_id, signal_id, name, payload, sender, created_at)
    VALUES (%(tenant_id)s, %(run_id)s, %(signal_id)s, %(name)s, %(payload)s, %(sender)s,
            %(created_at)s)
    ON CONFLICT DO NOTHING
    RETURNING name
), woken AS (
    UPDATE runs
       SET next_wake_at = %(created_at)s,
           control_pending = runs.control_pending OR sent.name LIKE 'underway.%%'
      FROM sent
     WHERE runs.tenant_id = %(tenant_id)s AND runs.run_id = %(run_id)s
       AND runs.status NOT IN ('completed', 'failed', 'cancelled')
       AND (runs.waiting_signal = sent.name OR sent.name LIKE 'underway.%%')
)
SELECT count(*) FROM sent

-- name: pending_signals
SELECT tenant_id, run_id, signal_id, name, payload, sender, created_at FROM signals
 WHERE tenant_id = %(tenant_id)s AND run_id = %(run_id)s AND NOT consumed
 ORDER BY created_at, signal_id COLLATE "C"

-- name: actionable_signals
-- What an activation acts on, oldest first: every control signal, and the oldest signal
-- with the name the run waits for (NULL: none). Each half walks its own partial index of
-- unconsumed signals, so the read costs the rows it returns: never the signals the run
-- consumed, nor those it leaves unread.
SELECT * FROM (
    SELECT tenant_id, run_id, signal_id, name, payload, sender, created_at FROM signals
     WHERE tenant_id = %(tenant_id)s AND run_id = %(run_id)s AND NOT consumed
       AND name LIKE 'underway.%%'
    UNION ALL
    (SELECT tenant_id, run_id, signal_id, name, payload, sender, created_at FROM signals
      WHERE tenant_id = %(tenant_id)s AND run_id = %(run_id)s AND NOT consumed
        AND name = %(waiting)s
      ORDER BY created_at, signal_id COLLATE "C" LIMIT 1)) AS s
 ORDER BY created_at, signal_id COLLATE "C"

-- name: circuit_admit
-- One statement: a cooled-down open circuit hands out exactly one trial (the row lock of the
-- UPDATE serializes competing callers; the loser sees the trial already taken).
WITH current AS (
    SELECT open_until, trial_until FROM circuits
     WHERE tenant_id = %(tenant_id)s AND name = %(circuit)s
), trial AS (
    UPDATE circuits SET trial_until = %(trial_until)s, updated_at = %(now)s
     WHERE tenant_id = %(tenant_id)s AND name = %(circuit)s
       AND open_until IS NOT NULL AND open_until <= %(now)s
       AND (trial_until IS NULL OR trial_until <= %(now)s)
    RETURNING 1
)
SELECT CASE
         WHEN EXISTS (SELECT 1 FROM trial) THEN 'trial'
         WHEN NOT EXISTS (SELECT 1 FROM current WHERE open_until IS NOT NULL) THEN 'closed'
         ELSE 'open'
       END

-- name: circuit_record
INSERT INTO circuits (tenant_id, name, failures, open_until, trial_until, updated_at)
VALUES (%(tenant_id)s, %(circuit)s, CASE WHEN %(ok)s THEN 0 ELSE 1 END,
        CASE WHEN NOT %(ok)s AND %(threshold)s <= 1 THEN %(open_until)s END, NULL, %(now)s)
ON CONFLICT (tenant_id, name) DO UPDATE
   SET failures = CASE WHEN %(ok)s THEN 0 ELSE circuits.failures + 1 END,
       open_until = CASE
           WHEN %(ok)s THEN NULL
           WHEN circuits.open_until IS NOT NULL
             OR circuits.failures + 1 >= %(threshold)s THEN %(open_until)s
           ELSE NULL END,
       trial_until = NULL,
       updated_at = %(now)s

-- name: put_blob_chunk
-- A chunk written again (a retry after a crash) replaces the one before and is marked
-- written now, so the blob collector spares it while its blob's row is on its way.
INSERT INTO blob_chunks (tenant_id, key, idx, data, written_at)
VALUES (%(tenant_id)s, %(key)s, %(idx)s, %(data)s, extract(epoch FROM clock_timestamp()))
ON CONFLICT (tenant_id, key, idx) DO UPDATE
   SET data = excluded.data, written_at = excluded.written_at

-- name: get_blob_chunk
SELECT data FROM blob_chunks
 WHERE tenant_id = %(tenant_id)s AND key = %(key)s AND idx = %(idx)s

-- name: get_blobs
SELECT key, data FROM blobs WHERE tenant_id = %(tenant_id)s AND key = ANY(%(keys)s)

-- name: get_blob_chain
-- A blob and the blobs it links to: one whose bytes begin {"p":" (a codec list node)
-- links to the key in the 64 bytes after that. Sealed (encrypted) blobs link nowhere.
WITH RECURSIVE chain(key, data, depth) AS (
    SELECT key, data, 1 FROM blobs WHERE tenant_id = %(tenant_id)s AND key = %(key)s
    UNION ALL
    SELECT b.key, b.data, chain.depth + 1
    FROM chain JOIN blobs AS b
        ON b.tenant_id = %(tenant_id)s
        AND b.key = encode(substring(chain.data FROM 7 FOR 64), 'escape')
    WHERE chain.depth < %(limit)s
        AND substring(chain.data FROM 1 FOR 6) = '\x7b2270223a22'::bytea
)
SELECT key, data FROM chain

-- name: held_leases
SELECT tenant_id, run_id, lease_owner FROM runs
 WHERE lease_owner IS NOT NULL AND lease_expires_at >= %(now)s

-- name: expire_lease
UPDATE runs SET lease_expires_at = 0
 WHERE tenant_id = %(tenant_id)s AND run_id = %(run_id)s AND lease_owner = %(owner)s

-- name: next_wake_at
SELECT MIN(next_wake_at) FROM runs
 WHERE next_wake_at IS NOT NULL AND status NOT IN ('completed', 'failed', 'cancelled')
   AND next_wake_at > '-Infinity' AND next_wake_at < 'Infinity'

-- name: suspect_runs
-- Rows that would stop their run for good if the journal contradicts them (see
-- LeaseStore.suspect_runs): each is folded and compared by underway.projection.
SELECT tenant_id, run_id FROM runs AS r
 WHERE next_wake_at IN ('NaN', 'Infinity', '-Infinity')
    OR lease_expires_at IN ('NaN', 'Infinity', '-Infinity')
    OR (lease_owner IS NOT NULL AND (lease_expires_at IS NULL
                                     OR lease_expires_at > %(horizon)s))
    OR (status IN ('completed', 'failed', 'cancelled') AND NOT EXISTS (
            SELECT 1 FROM events AS e
             WHERE e.tenant_id = r.tenant_id AND e.run_id = r.run_id AND e.seq = r.last_seq
               AND e.type IN ('RunCompleted', 'RunFailed', 'RunCancelled')))
    OR (next_wake_at IS NULL AND status NOT IN ('completed', 'failed', 'cancelled')
        AND (lease_owner IS NULL OR lease_expires_at < %(now)s)
        AND (status = 'ready' OR EXISTS (
            SELECT 1 FROM events AS e
             WHERE e.tenant_id = r.tenant_id AND e.run_id = r.run_id AND e.seq = r.last_seq
               AND e.type = 'TimerSet')))
 ORDER BY tenant_id, run_id
 LIMIT %(limit)s

-- name: suspect_runs_since
-- The suspect rows among those written at or after since: a look that reads only what
-- changed since the last look. The window is read first, on runs_updated (migration
-- 0029), and each of its rows' head event is probed on its key: ordered by the primary
-- key under a limit, the planner would walk a whole index hoping to stop early, and an
-- EXISTS under OR may be hashed over every event.
WITH recent AS MATERIALIZED (
    SELECT tenant_id, run_id, status, last_seq, next_wake_at, lease_owner, lease_expires_at
      FROM runs WHERE updated_at >= %(since)s
)
SELECT tenant_id, run_id FROM (
    SELECT r.*, (SELECT e.type FROM events AS e
                  WHERE e.tenant_id = r.tenant_id AND e.run_id = r.run_id
                    AND e.seq = r.last_seq) AS head
      FROM recent AS r
) AS r
 WHERE next_wake_at IN ('NaN', 'Infinity', '-Infinity')
    OR lease_expires_at IN ('NaN', 'Infinity', '-Infinity')
    OR (lease_owner IS NOT NULL AND (lease_expires_at IS NULL
                                     OR lease_expires_at > %(horizon)s))
    OR (status IN ('completed', 'failed', 'cancelled')
        AND COALESCE(head, '') NOT IN ('RunCompleted', 'RunFailed', 'RunCancelled'))
    OR (next_wake_at IS NULL AND status NOT IN ('completed', 'failed', 'cancelled')
        AND (lease_owner IS NULL OR lease_expires_at < %(now)s)
        AND (status = 'ready' OR head = 'TimerSet'))
 ORDER BY tenant_id, run_id
 LIMIT %(limit)s

-- name: repair_run
-- A row rewritten from its journal, only while it is as it was read and the journal's
-- head has not moved; with token, the lease of that token is released with it. An append
-- holds the row's lock, so the head cannot move between this check and its write.
UPDATE runs
   SET last_seq = %(head_seq)s, last_hash = %(head_hash)s::text, status = %(status)s,
       step = %(step)s, next_wake_at = %(wake)s, waiting_signal = %(waiting_signal)s,
       error = %(error)s, request_kind = %(request_kind)s,
       lease_owner = CASE WHEN %(clear)s OR %(token)s::bigint IS NOT NULL THEN NULL
                          ELSE lease_owner END,
       lease_expires_at = CASE WHEN %(clear)s OR %(token)s::bigint IS NOT NULL THEN NULL
                               ELSE lease_expires_at END,
       updated_at = %(now)s
 WHERE tenant_id = %(tenant_id)s AND run_id = %(run_id)s AND lease_token = %(seen_token)s
   AND last_seq = %(seen_seq)s AND status = %(seen_status)s
   AND (%(token)s::bigint IS NULL OR lease_owner IS NOT NULL)
   AND COALESCE((SELECT e.seq FROM events AS e
                  WHERE e.tenant_id = %(tenant_id)s AND e.run_id = %(run_id)s
                  ORDER BY e.seq DESC LIMIT 1), 0) = %(head_seq)s

-- Schedules and intake (migration 0004). Claiming schedules and finding the next one due
-- span tenants, like claiming runs.

-- name: put_schedule
-- An unchanged cron expression and zone keep the pending tick, so declaring the same
-- schedule again (say, at every deploy) never skips a tick that is due.
INSERT INTO schedules (tenant_id, name, flow, cron, timezone, input, queue, next_fire_at,
                       enabled, created_at)
VALUES (%(tenant_id)s, %(schedule)s, %(flow)s, %(cron)s, %(timezone)s, %(input)s, %(queue)s,
        %(next_fire_at)s, %(enabled)s, %(created_at)s)
ON CONFLICT (tenant_id, name) DO UPDATE
   SET flow = excluded.flow, cron = excluded.cron, timezone = excluded.timezone,
       input = excluded.input, queue = excluded.queue, enabled = excluded.enabled,
       next_fire_at = CASE
           WHEN schedules.cron = excluded.cron AND schedules.timezone = excluded.timezone
                AND schedules.enabled THEN schedules.next_fire_at
           ELSE excluded.next_fire_at END
RETURNING tenant_id, name, flow, cron, timezone, input, queue, next_fire_at, enabled,
          created_at, last_fired_at, claimed_until

-- name: get_schedule
SELECT tenant_id, name, flow, cron, timezone, input, queue, next_fire_at, enabled,
       created_at, last_fired_at, claimed_until
  FROM schedules WHERE tenant_id = %(tenant_id)s AND name = %(schedule)s

-- name: list_schedules
SELECT tenant_id, name, flow, cron, timezone, input, queue, next_fire_at, enabled,
       created_at, last_fired_at, claimed_until
  FROM schedules WHERE tenant_id = %(tenant_id)s ORDER BY name COLLATE "C"

-- name: delete_schedule
DELETE FROM schedules WHERE tenant_id = %(tenant_id)s AND name = %(schedule)s

-- name: claim_schedules
-- MATERIALIZED: the locking subquery runs once, so LIMIT bounds what is claimed; rows
-- another scheduler is claiming are skipped, not waited for.
WITH due AS MATERIALIZED (
    SELECT tenant_id, name FROM schedules
     WHERE enabled AND next_fire_at <= %(now)s
       AND (claimed_until IS NULL OR claimed_until < %(now)s)
       AND flow = ANY(%(flows)s::text[])
     ORDER BY next_fire_at
     LIMIT %(limit)s
       FOR UPDATE SKIP LOCKED
)
UPDATE schedules s SET claimed_until = %(until)s
  FROM due
 WHERE s.tenant_id = due.tenant_id AND s.name = due.name
RETURNING s.tenant_id, s.name, s.flow, s.cron, s.timezone, s.input, s.queue, s.next_fire_at,
          s.enabled, s.created_at, s.last_fired_at, s.claimed_until

-- name: advance_schedule
UPDATE schedules
   SET next_fire_at = %(next_fire_at)s,
       last_fired_at = COALESCE(%(fired_at)s, last_fired_at), claimed_until = NULL
 WHERE tenant_id = %(tenant_id)s AND name = %(schedule)s AND next_fire_at = %(expected)s

-- name: next_schedule_at
SELECT MIN(next_fire_at) FROM schedules
 WHERE enabled AND (claimed_until IS NULL OR claimed_until < %(now)s)
   AND flow = ANY(%(flows)s::text[])

-- name: get_intake
SELECT tenant_id, idempotency_key, entity_id, event_type, action, run_id, created_at
  FROM intake WHERE tenant_id = %(tenant_id)s AND idempotency_key = %(idempotency_key)s

-- name: lock_intake_entity
-- Events for one entity take turns, so two of them can never both find it unowned.
SELECT pg_advisory_xact_lock(hashtext('underway.intake:' || %(tenant_id)s),
                             hashtext(%(entity_id)s))

-- name: insert_intake
-- A concurrent event with the same key (for another entity) waits for this one's outcome
-- on the primary key, then inserts nothing.
INSERT INTO intake (tenant_id, idempotency_key, entity_id, event_type, action, run_id,
                    created_at)
VALUES (%(tenant_id)s, %(idempotency_key)s, %(entity_id)s, %(event_type)s, %(action)s,
        %(run_id)s, %(now)s)
ON CONFLICT DO NOTHING
RETURNING 1

-- name: entity_owner
-- Ownership ends when the run finishes; the row stays until a new owner replaces it.
SELECT o.run_id FROM intake_owners o
  JOIN runs r ON r.tenant_id = o.tenant_id AND r.run_id = o.run_id
 WHERE o.tenant_id = %(tenant_id)s AND o.entity_id = %(entity_id)s
   AND r.status NOT IN ('completed', 'failed', 'cancelled')

-- name: lock_entity_owner
-- As entity_owner, locking the owner's row as a signal does, so its status cannot change
-- between this check and the signal.
SELECT o.run_id FROM intake_owners o
  JOIN runs r ON r.tenant_id = o.tenant_id AND r.run_id = o.run_id
 WHERE o.tenant_id = %(tenant_id)s AND o.entity_id = %(entity_id)s
   AND r.status NOT IN ('completed', 'failed', 'cancelled')
   FOR NO KEY UPDATE OF r

-- name: set_entity_owner
INSERT INTO intake_owners (tenant_id, entity_id, run_id, since)
VALUES (%(tenant_id)s, %(entity_id)s, %(run_id)s, %(now)s)
ON CONFLICT (tenant_id, entity_id) DO UPDATE SET run_id = excluded.run_id, since = excluded.since

-- Approvers and decision nonces (migration 0006).

-- name: put_approver
-- Registering an approver again replaces its key and roles and lifts any revocation.
INSERT INTO approvers (tenant_id, approver_id, public_key, roles, created_at, revoked_at)
VALUES (%(tenant_id)s, %(approver_id)s, %(public_key)s, %(roles)s, %(created_at)s,
        %(revoked_at)s)
ON CONFLICT (tenant_id, approver_id) DO UPDATE
   SET public_key = excluded.public_key, roles = excluded.roles,
       created_at = excluded.created_at, revoked_at = excluded.revoked_at

-- name: get_approver
SELECT tenant_id, approver_id, public_key, roles, created_at, revoked_at
  FROM approvers WHERE tenant_id = %(tenant_id)s AND approver_id = %(approver_id)s

-- name: list_approvers
SELECT tenant_id, approver_id, public_key, roles, created_at, revoked_at
  FROM approvers WHERE tenant_id = %(tenant_id)s ORDER BY approver_id COLLATE "C"

-- name: revoke_approver
-- The first revocation's time stands.
UPDATE approvers SET revoked_at = %(at)s
 WHERE tenant_id = %(tenant_id)s AND approver_id = %(approver_id)s AND revoked_at IS NULL

-- name: use_nonce
-- The primary key makes a nonce usable once per tenant: of two concurrent inserts, the
-- second waits for the first to commit and then inserts nothing.
INSERT INTO approval_nonces (tenant_id, nonce, run_id, request_id, used_at)
VALUES (%(tenant_id)s, %(nonce)s, %(run_id)s, %(request_id)s, %(at)s)
ON CONFLICT (tenant_id, nonce) DO NOTHING
RETURNING 1

-- name: nonce_owner
SELECT run_id, request_id FROM approval_nonces
 WHERE tenant_id = %(tenant_id)s AND nonce = %(nonce)s

-- name: knowledge_get
-- Knowledge base (underway.knowledge): long-term memory, kept apart from run state. Every
-- knowledge_ query belongs to it.
SELECT tenant_id, id, text, source, created_at, expires_at, roles, sensitivity, metadata,
       NULL, sealed, subject
  FROM knowledge WHERE tenant_id = %(tenant_id)s AND id = %(id)s

-- name: knowledge_put
-- tsv is the tsvector of the words the code split the text into (or their blind terms),
-- written in tsvector's own syntax, which PostgreSQL reads without parsing words itself.
INSERT INTO knowledge (tenant_id, id, text, source, created_at, expires_at, roles,
                       sensitivity, metadata, sealed, tsv, subject)
VALUES (%(tenant_id)s, %(id)s, %(text)s, %(source)s, %(created_at)s, %(expires_at)s,
        %(roles)s::text[], %(sensitivity)s, %(metadata)s, %(sealed)s, %(tsv)s::tsvector,
        %(subject)s)
ON CONFLICT (tenant_id, id) DO UPDATE
   SET text = excluded.text, source = excluded.source, created_at = excluded.created_at,
       expires_at = excluded.expires_at, roles = excluded.roles,
       sensitivity = excluded.sensitivity, metadata = excluded.metadata,
       sealed = excluded.sealed, tsv = excluded.tsv, subject = excluded.subject

-- name: knowledge_batch
-- A batch of rows to index again (KnowledgeBase.reindex), in key order after the last one.
SELECT tenant_id, id, text, sealed
  FROM knowledge
 WHERE (tenant_id, id) > (%(after_tenant)s, %(after_id)s)
   AND (%(tenant_id)s::text IS NULL OR tenant_id = %(tenant_id)s)
 ORDER BY tenant_id, id
 LIMIT %(limit)s

-- name: knowledge_set_tsv
-- Only while the row holds what its new terms were computed from: a row rewritten meanwhile
-- was indexed by its writer.
UPDATE knowledge SET tsv = %(tsv)s::tsvector
 WHERE tenant_id = %(tenant_id)s AND id = %(id)s AND text = %(text)s
   AND sealed IS NOT DISTINCT FROM %(sealed)s

-- name: knowledge_delete
DELETE FROM knowledge WHERE tenant_id = %(tenant_id)s AND id = %(id)s RETURNING 1

-- name: knowledge_purge_expired
DELETE FROM knowledge WHERE expires_at <= %(now)s

-- name: knowledge_delete_subject
DELETE FROM knowledge WHERE tenant_id = %(tenant_id)s AND subject = %(subject)s

-- name: knowledge_search
-- Every filter is applied before LIMIT, so hidden records never crowd out visible ones.
SELECT k.tenant_id, k.id, k.text, k.source, k.created_at, k.expires_at, k.roles,
       k.sensitivity, k.metadata, ts_rank(k.tsv, q) AS score, k.sealed, k.subject
  FROM knowledge k, CAST(%(query)s AS tsquery) AS q
 WHERE k.tenant_id = %(tenant_id)s AND k.tsv @@ q
   AND (k.expires_at IS NULL OR k.expires_at > %(now)s)
   AND k.sensitivity = ANY(%(sensitivities)s::text[])
   AND (cardinality(k.roles) = 0 OR k.roles && %(roles)s::text[])
 ORDER BY score DESC, k.created_at DESC, k.id COLLATE "C"
 LIMIT %(limit)s

-- API keys, intake webhook secrets and the access log (migrations 0009, 0011).

-- name: insert_api_key
INSERT INTO api_keys (key_id, tenant_id, role, name, token_hash, created_at, revoked_at)
VALUES (%(key_id)s, %(tenant_id)s, %(role)s, %(name)s, %(token_hash)s, %(created_at)s,
        %(revoked_at)s)
ON CONFLICT DO NOTHING

-- name: get_api_key
SELECT key_id, tenant_id, role, name, token_hash, created_at, revoked_at
  FROM api_keys WHERE key_id = %(key_id)s

-- name: list_api_keys
SELECT key_id, tenant_id, role, name, token_hash, created_at, revoked_at
  FROM api_keys WHERE (%(tenant_id)s::text IS NULL OR tenant_id = %(tenant_id)s)
 ORDER BY created_at, key_id COLLATE "C"

-- name: revoke_api_key
UPDATE api_keys SET revoked_at = %(at)s
 WHERE tenant_id = %(tenant_id)s AND key_id = %(key_id)s AND revoked_at IS NULL

-- name: put_intake_secret
INSERT INTO intake_secrets (tenant_id, source, secret, created_at)
VALUES (%(tenant_id)s, %(source)s, %(secret)s, %(created_at)s)
ON CONFLICT (tenant_id, source) DO UPDATE
   SET secret = excluded.secret, created_at = excluded.created_at

-- name: get_intake_secret
SELECT tenant_id, source, secret, created_at FROM intake_secrets
 WHERE tenant_id = %(tenant_id)s AND source = %(source)s

-- name: list_intake_secrets
SELECT tenant_id, source, secret, created_at FROM intake_secrets
 WHERE tenant_id = %(tenant_id)s ORDER BY source COLLATE "C"

-- name: delete_intake_secret
DELETE FROM intake_secrets WHERE tenant_id = %(tenant_id)s AND source = %(source)s

-- name: log_access
INSERT INTO access_log (tenant_id, at, key_id, key_name, run_id, endpoint, purpose, revealed,
                        prev_hash, hash)
VALUES (%(tenant_id)s, %(at)s, %(key_id)s, %(key_name)s, %(run_id)s, %(endpoint)s,
        %(purpose)s, %(revealed)s, %(prev_hash)s, %(hash)s)
RETURNING seq

-- name: open_access_head
INSERT INTO access_log_heads (tenant_id, seq, hash, entries)
VALUES (%(tenant_id)s, 0, %(genesis)s, 0)
ON CONFLICT DO NOTHING

-- name: lock_access_head
SELECT tenant_id, seq, hash, entries FROM access_log_heads
 WHERE tenant_id = %(tenant_id)s FOR UPDATE

-- name: set_access_head
UPDATE access_log_heads SET seq = %(seq)s, hash = %(hash)s, entries = %(entries)s
 WHERE tenant_id = %(tenant_id)s

-- name: access_head
SELECT tenant_id, seq, hash, entries FROM access_log_heads
 WHERE tenant_id = %(tenant_id)s AND entries > 0

-- name: access_chain
SELECT tenant_id, at, key_id, key_name, run_id, endpoint, seq, purpose, revealed, prev_hash,
       hash
  FROM access_log WHERE tenant_id = %(tenant_id)s AND seq > %(after)s
 ORDER BY seq LIMIT %(limit)s

-- name: list_access
SELECT tenant_id, at, key_id, key_name, run_id, endpoint, seq, purpose, revealed, prev_hash,
       hash
  FROM access_log
 WHERE tenant_id = %(tenant_id)s
   AND (%(run_id)s::text IS NULL OR run_id = %(run_id)s)
   AND (%(key_id)s::text IS NULL OR key_id = %(key_id)s)
   AND (%(who)s::text IS NULL OR key_name = %(who)s)
   AND (%(purpose)s::text IS NULL OR purpose = %(purpose)s)
   AND (%(since)s::float8 IS NULL OR at >= %(since)s)
   AND (%(until)s::float8 IS NULL OR at < %(until)s)
   AND (%(before)s::bigint IS NULL OR seq < %(before)s)
 ORDER BY seq DESC
 LIMIT %(limit)s

-- name: record_consent
INSERT INTO consents (tenant_id, subject, purpose, state, reference, recorded_by, at)
VALUES (%(tenant_id)s, %(subject)s, %(purpose)s, %(state)s, %(reference)s, %(by)s, %(at)s)
RETURNING seq

-- name: current_consents
SELECT DISTINCT ON (purpose COLLATE "C")
       tenant_id, subject, purpose, state, reference, recorded_by, at, seq
  FROM consents
 WHERE tenant_id = %(tenant_id)s AND subject = %(subject)s
   AND (%(purposes)s::text[] IS NULL OR purpose = ANY(%(purposes)s::text[]))
 ORDER BY purpose COLLATE "C", seq DESC

-- name: consent_history
SELECT tenant_id, subject, purpose, state, reference, recorded_by, at, seq FROM consents
 WHERE tenant_id = %(tenant_id)s AND subject = %(subject)s
   AND (%(purpose)s::text IS NULL OR purpose = %(purpose)s)
 ORDER BY seq

-- Retention and legal holds (migration 0013).

-- name: put_hold
-- A standing hold is left as it is (no row changes); a released one is replaced.
INSERT INTO legal_holds (tenant_id, kind, target, reason, held_by, created_at, released_at,
                         released_by)
VALUES (%(tenant_id)s, %(kind)s, %(target)s, %(reason)s, %(by)s, %(created_at)s, NULL, NULL)
ON CONFLICT (tenant_id, kind, target) DO UPDATE
   SET reason = excluded.reason, held_by = excluded.held_by,
       created_at = excluded.created_at, released_at = NULL, released_by = NULL
 WHERE legal_holds.released_at IS NOT NULL

-- name: release_hold
UPDATE legal_holds SET released_at = %(at)s, released_by = %(by)s
 WHERE tenant_id = %(tenant_id)s AND kind = %(kind)s AND target = %(target)s
   AND released_at IS NULL

-- name: list_holds
SELECT tenant_id, kind, target, reason, held_by, created_at, released_at, released_by
  FROM legal_holds
 WHERE (%(tenant_id)s::text IS NULL OR tenant_id = %(tenant_id)s)
   AND (%(released)s OR released_at IS NULL)
 ORDER BY tenant_id COLLATE "C", kind COLLATE "C", target COLLATE "C"

-- name: retention_candidates
SELECT r.tenant_id, r.run_id, r.flow, r.status, r.step, r.idempotency_key, r.last_seq,
       r.last_hash, r.next_wake_at, r.waiting_signal, r.control_pending, r.lease_owner,
       r.lease_token, r.lease_expires_at, r.created_at, r.updated_at, r.error, r.queue,
       r.subject, r.purpose, r.request_kind
  FROM runs AS r
 WHERE r.tenant_id = %(tenant_id)s AND r.status = %(status)s
   AND r.updated_at < %(ended_before)s
   AND (%(flow)s::text IS NULL OR r.flow = %(flow)s)
   AND (%(after_at)s::float8 IS NULL OR r.updated_at > %(after_at)s
        OR (r.updated_at = %(after_at)s AND r.run_id COLLATE "C" > %(after_id)s))
   AND NOT EXISTS (SELECT 1 FROM purged_runs AS p
                    WHERE p.tenant_id = r.tenant_id AND p.run_id = r.run_id)
 ORDER BY r.updated_at, r.run_id COLLATE "C"
 LIMIT %(limit)s

-- name: purge_head
-- What a purge checks, with the run's row locked: its status, whether a legal hold stands
-- on it or its subject, whether it was purged already, and the journal's extent.
SELECT r.status, r.last_seq,
       EXISTS (SELECT 1 FROM legal_holds AS h
                WHERE h.tenant_id = r.tenant_id AND h.released_at IS NULL
                  AND ((h.kind = 'run' AND h.target = r.run_id)
                       OR (h.kind = 'subject' AND h.target = r.subject))),
       EXISTS (SELECT 1 FROM purged_runs AS p
                WHERE p.tenant_id = r.tenant_id AND p.run_id = r.run_id),
       (SELECT COUNT(*) FROM events AS e
         WHERE e.tenant_id = r.tenant_id AND e.run_id = r.run_id),
       COALESCE((SELECT e.seq FROM events AS e
                  WHERE e.tenant_id = r.tenant_id AND e.run_id = r.run_id
                  ORDER BY e.seq DESC LIMIT 1), 0)
  FROM runs AS r WHERE r.tenant_id = %(tenant_id)s AND r.run_id = %(run_id)s
   FOR UPDATE OF r

-- name: tombstone_events
UPDATE events AS e SET payload = t.payload
  FROM unnest(%(seqs)s::bigint[], %(types)s::text[], %(payloads)s::bytea[],
              %(hashes)s::text[]) AS t(seq, type, payload, hash)
 WHERE e.tenant_id = %(tenant_id)s AND e.run_id = %(run_id)s AND e.seq = t.seq
   AND e.type = t.type AND e.hash = decode(t.hash, 'hex')

-- name: delete_signals_of_run
DELETE FROM signals WHERE tenant_id = %(tenant_id)s AND run_id = %(run_id)s

-- name: clear_run_fields
-- The error may quote the payloads; the subject ties the run to a person.
UPDATE runs SET error = NULL, subject = NULL
 WHERE tenant_id = %(tenant_id)s AND run_id = %(run_id)s

-- name: insert_purged_run
INSERT INTO purged_runs (tenant_id, run_id, sweep_id, purged_at, events, rule)
VALUES (%(tenant_id)s, %(run_id)s, %(sweep_id)s, %(at)s, %(events)s, %(rule)s)

-- name: purged_runs
SELECT tenant_id, run_id, sweep_id, purged_at, events, rule FROM purged_runs
 WHERE tenant_id = %(tenant_id)s AND (%(sweep_id)s::text IS NULL OR sweep_id = %(sweep_id)s)
   AND (%(run_id)s::text IS NULL OR run_id = %(run_id)s)
 ORDER BY purged_at DESC, run_id COLLATE "C"
 LIMIT %(limit)s

-- name: blob_keys
SELECT key FROM blobs
 WHERE tenant_id = %(tenant_id)s AND (%(after)s::text IS NULL OR key COLLATE "C" > %(after)s)
 ORDER BY key COLLATE "C" LIMIT %(limit)s

-- name: delete_blobs
DELETE FROM blobs
 WHERE tenant_id = %(tenant_id)s AND key = ANY(%(keys)s::text[])
   AND written_at < extract(epoch FROM clock_timestamp()) - %(idle)s

-- name: delete_loose_chunks
-- Chunks no blob row refers to (their blob was deleted, or a crash came before its row
-- was written), not written lately.
DELETE FROM blob_chunks
 WHERE tenant_id = %(tenant_id)s
   AND written_at < extract(epoch FROM clock_timestamp()) - %(idle)s
   AND NOT EXISTS (SELECT 1 FROM blobs AS b
                    WHERE b.tenant_id = blob_chunks.tenant_id AND b.key = blob_chunks.key)

-- name: record_sweep
INSERT INTO retention_sweeps (sweep_id, tenant_id, started_at, swept_by, finished_at, purged,
                              held, skipped, blobs_deleted, collected_at, forgotten)
VALUES (%(sweep_id)s, %(tenant_id)s, %(started_at)s, %(by)s, %(finished_at)s, %(purged)s,
        %(held)s, %(skipped)s, %(blobs_deleted)s, %(collected_at)s, %(forgotten)s)
ON CONFLICT (sweep_id, tenant_id) DO UPDATE
   SET started_at = excluded.started_at, swept_by = excluded.swept_by,
       finished_at = excluded.finished_at, purged = excluded.purged, held = excluded.held,
       skipped = excluded.skipped, blobs_deleted = excluded.blobs_deleted,
       collected_at = excluded.collected_at, forgotten = excluded.forgotten

-- name: list_sweeps
SELECT sweep_id, tenant_id, started_at, swept_by, finished_at, purged, held, skipped,
       blobs_deleted, collected_at, forgotten
  FROM retention_sweeps
 WHERE (%(tenant_id)s::text IS NULL OR tenant_id = %(tenant_id)s)
 ORDER BY started_at DESC, sweep_id COLLATE "C", tenant_id COLLATE "C"
 LIMIT %(limit)s

-- Encryption at rest: tenants' data keys, kept wrapped (migration 0014), and the sealed
-- rows a key rotation seals again.

-- name: lock_data_keys
-- Changes to a tenant's keys take turns, so two first keys are never both made active.
SELECT pg_advisory_xact_lock(hashtext('underway.data_keys:' || %(tenant_id)s),
                             hashtext(%(scope)s))

-- name: insert_data_key
INSERT INTO data_keys (tenant_id, key_id, scope, wrapped, kek_id, created_at, state)
VALUES (%(tenant_id)s, %(key_id)s, %(scope)s, %(wrapped)s, %(kek_id)s, %(created_at)s,
        'active')
ON CONFLICT (tenant_id, key_id) DO NOTHING
RETURNING tenant_id, key_id, wrapped, kek_id, created_at, state, scope

-- name: get_data_key
SELECT tenant_id, key_id, wrapped, kek_id, created_at, state, scope FROM data_keys
 WHERE tenant_id = %(tenant_id)s AND key_id = %(key_id)s

-- name: active_data_key
SELECT tenant_id, key_id, wrapped, kek_id, created_at, state, scope FROM data_keys
 WHERE tenant_id = %(tenant_id)s AND scope = %(scope)s AND state = 'active'

-- name: retire_data_key
UPDATE data_keys SET state = 'retired'
 WHERE tenant_id = %(tenant_id)s AND scope = %(scope)s AND state = 'active'

-- name: list_data_keys
SELECT tenant_id, key_id, wrapped, kek_id, created_at, state, scope FROM data_keys
 WHERE (%(tenant_id)s::text IS NULL OR tenant_id = %(tenant_id)s)
 ORDER BY created_at, tenant_id COLLATE "C", key_id COLLATE "C"

-- name: rewrap_data_key
UPDATE data_keys SET wrapped = %(wrapped)s, kek_id = %(kek_id)s
 WHERE tenant_id = %(tenant_id)s AND key_id = %(key_id)s AND kek_id = %(expected_kek_id)s
   AND state <> 'destroyed'

-- name: destroy_data_key
UPDATE data_keys SET wrapped = ''::bytea, state = 'destroyed'
 WHERE tenant_id = %(tenant_id)s AND key_id = %(key_id)s AND state <> 'destroyed'

-- name: destroy_scope_keys
UPDATE data_keys SET wrapped = ''::bytea, state = 'destroyed'
 WHERE tenant_id = %(tenant_id)s AND scope = %(scope)s AND state <> 'destroyed'

-- name: insert_erasure
INSERT INTO erasures (tenant_id, subject, erased_at, erased_by, reason, runs, knowledge, keys,
                      vault)
VALUES (%(tenant_id)s, %(subject)s, %(erased_at)s, %(by)s, %(reason)s, %(runs)s,
        %(knowledge)s, %(keys)s, %(vault)s)
RETURNING seq

-- name: list_erasures
SELECT tenant_id, subject, erased_at, erased_by, reason, runs, knowledge, keys, vault, seq
  FROM erasures
 WHERE (%(tenant_id)s::text IS NULL OR tenant_id = %(tenant_id)s)
   AND (%(subject)s::text IS NULL OR subject = %(subject)s)
 ORDER BY seq

-- name: sealed_blob_rows
SELECT key, data FROM blobs
 WHERE tenant_id = %(tenant_id)s AND key COLLATE "C" > %(first)s
 ORDER BY key COLLATE "C" LIMIT %(limit)s

-- name: sealed_signal_rows
SELECT run_id, signal_id, name, payload FROM signals
 WHERE tenant_id = %(tenant_id)s AND NOT consumed
   AND (run_id COLLATE "C", signal_id COLLATE "C") > (%(first)s, %(second)s)
 ORDER BY run_id COLLATE "C", signal_id COLLATE "C" LIMIT %(limit)s

-- name: sealed_schedule_rows
SELECT name, input FROM schedules
 WHERE tenant_id = %(tenant_id)s AND name COLLATE "C" > %(first)s
 ORDER BY name COLLATE "C" LIMIT %(limit)s

-- name: reseal_blob
UPDATE blobs SET data = %(new)s
 WHERE tenant_id = %(tenant_id)s AND key = %(first)s AND data = %(old)s

-- name: reseal_signal
UPDATE signals SET payload = %(new)s
 WHERE tenant_id = %(tenant_id)s AND run_id = %(first)s AND signal_id = %(second)s
   AND NOT consumed AND payload = %(old)s

-- name: reseal_schedule
UPDATE schedules SET input = %(new)s
 WHERE tenant_id = %(tenant_id)s AND name = %(first)s AND input = %(old)s

-- name: budget_used
SELECT used FROM budget_usage WHERE tenant_id = %(tenant_id)s AND since = %(since)s

-- name: budget_lock_used
SELECT used FROM budget_usage WHERE tenant_id = %(tenant_id)s AND since = %(since)s
   FOR UPDATE

-- name: budget_seed
INSERT INTO budget_usage (tenant_id, since, used)
VALUES (%(tenant_id)s, %(since)s, %(used)s)
ON CONFLICT (tenant_id, since) DO NOTHING

-- name: budget_put_used
UPDATE budget_usage SET used = %(used)s WHERE tenant_id = %(tenant_id)s AND since = %(since)s

-- name: budget_hold
SELECT since, amounts FROM budget_holds WHERE tenant_id = %(tenant_id)s AND hold_key = %(key)s

-- name: budget_put_hold
INSERT INTO budget_holds (tenant_id, hold_key, since, amounts)
VALUES (%(tenant_id)s, %(key)s, %(since)s, %(amounts)s)
ON CONFLICT (tenant_id, hold_key) DO UPDATE SET since = excluded.since,
                                                amounts = excluded.amounts

-- name: budget_forget_holds
DELETE FROM budget_holds WHERE tenant_id = %(tenant_id)s AND since < %(before)s

-- name: budget_forget_used
DELETE FROM budget_usage WHERE tenant_id = %(tenant_id)s AND since < %(before)s

-- name: span_cursor
SELECT exported_seq FROM span_exports
 WHERE tenant_id = %(tenant_id)s AND run_id = %(run_id)s

-- name: advance_span_cursor
INSERT INTO span_exports (tenant_id, run_id, exported_seq)
VALUES (%(tenant_id)s, %(run_id)s, %(seq)s)
ON CONFLICT (tenant_id, run_id) DO UPDATE
   SET exported_seq = GREATEST(span_exports.exported_seq, excluded.exported_seq)

-- name: unexported_runs
SELECT r.tenant_id, r.run_id FROM runs r
  LEFT JOIN span_exports x ON x.tenant_id = r.tenant_id AND x.run_id = r.run_id
 WHERE r.updated_at >= %(since)s AND r.last_seq > COALESCE(x.exported_seq, 0)
 ORDER BY r.updated_at LIMIT %(limit)s

-- name: stream_append
-- Written in the arrays' order, in one statement; nothing is written unless the worker
-- still holds the run. Readers that LISTEN on underway_stream are woken with the run id.
WITH ins AS (
    INSERT INTO stream_deltas (tenant_id, run_id, call_key, step, call_index, attempt,
                               delta, written_at)
    SELECT %(tenant_id)s, %(run_id)s, u.k, u.s, u.i, u.a, u.d, u.w
      FROM unnest(%(keys)s::text[], %(steps)s::text[], %(indexes)s::int[],
                  %(attempts)s::int[], %(deltas)s::text[], %(written)s::float8[])
           WITH ORDINALITY AS u(k, s, i, a, d, w, n)
     WHERE EXISTS (SELECT 1 FROM runs WHERE tenant_id = %(tenant_id)s
                                        AND run_id = %(run_id)s AND lease_token = %(fence)s)
     ORDER BY u.n
    RETURNING stream_offset
), top AS (SELECT max(stream_offset) AS o FROM ins)
SELECT o, pg_notify('underway_stream', %(run_id)s) FROM top WHERE o IS NOT NULL

-- name: stream_attempt
SELECT COALESCE(MAX(attempt), 0) FROM stream_deltas
 WHERE tenant_id = %(tenant_id)s AND run_id = %(run_id)s AND call_key = %(key)s

-- name: stream_read
SELECT stream_offset, call_key, step, call_index, attempt, delta, written_at
  FROM stream_deltas
 WHERE tenant_id = %(tenant_id)s AND run_id = %(run_id)s AND stream_offset > %(after)s
 ORDER BY stream_offset LIMIT %(limit)s

-- name: stream_drop
DELETE FROM stream_deltas
 WHERE tenant_id = %(tenant_id)s AND run_id = %(run_id)s
   AND (%(keep)s::text IS NULL OR call_key <> %(keep)s::text)

-- name: stream_prune
DELETE FROM stream_deltas
 WHERE written_at < %(before)s
   AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.tenant_id = stream_deltas.tenant_id
                                          AND r.run_id = stream_deltas.run_id
                                          AND r.lease_owner IS NOT NULL)

-- name: stream_listen
-- A reader of live streams listens here; the payload of a notification is a run id.
LISTEN underway_stream

-- Forgetting purged runs (migration 0028): the candidates, what a forget checks, the rows
-- it deletes and the forget log it appends to.

-- name: forget_candidates
SELECT r.tenant_id, r.run_id, r.flow, r.status, r.step, r.idempotency_key, r.last_seq,
       r.last_hash, r.next_wake_at, r.waiting_signal, r.control_pending, r.lease_owner,
       r.lease_token, r.lease_expires_at, r.created_at, r.updated_at, r.error, r.queue,
       r.subject, r.purpose, r.request_kind
  FROM runs AS r JOIN purged_runs AS p ON p.tenant_id = r.tenant_id AND p.run_id = r.run_id
 WHERE r.tenant_id = %(tenant_id)s AND r.updated_at < %(ended_before)s
   AND (%(flow)s::text IS NULL OR r.flow = %(flow)s)
   AND (%(after_at)s::float8 IS NULL OR r.updated_at > %(after_at)s
        OR (r.updated_at = %(after_at)s AND r.run_id COLLATE "C" > %(after_id)s))
 ORDER BY r.updated_at, r.run_id COLLATE "C"
 LIMIT %(limit)s

-- name: forget_head
-- What a forget checks, with the run's row locked: its status and head, whether it was
-- purged, whether a legal hold stands on it or its subject.
SELECT r.status, r.last_seq, r.last_hash,
       EXISTS (SELECT 1 FROM purged_runs AS p
                WHERE p.tenant_id = r.tenant_id AND p.run_id = r.run_id) AS purged,
       EXISTS (SELECT 1 FROM legal_holds AS h
                WHERE h.tenant_id = r.tenant_id AND h.released_at IS NULL
                  AND ((h.kind = 'run' AND h.target = r.run_id)
                       OR (h.kind = 'subject' AND h.target = r.subject))) AS held
  FROM runs AS r WHERE r.tenant_id = %(tenant_id)s AND r.run_id = %(run_id)s
   FOR UPDATE OF r

-- name: forget_log_lock
-- Forgets of one tenant append to its forget log one at a time.
SELECT pg_advisory_xact_lock(hashtextextended('underway forget log ' || %(tenant_id)s, 0))

-- name: forget_log_tail
SELECT seq, hash FROM forgotten_runs WHERE tenant_id = %(tenant_id)s
 ORDER BY seq DESC LIMIT 1

-- name: forget_events
DELETE FROM events WHERE tenant_id = %(tenant_id)s AND run_id = %(run_id)s

-- name: forget_checkpoints
DELETE FROM checkpoints WHERE tenant_id = %(tenant_id)s AND run_id = %(run_id)s

-- name: forget_checkpoint_history
DELETE FROM checkpoint_history WHERE tenant_id = %(tenant_id)s AND run_id = %(run_id)s

-- name: forget_signals
DELETE FROM signals WHERE tenant_id = %(tenant_id)s AND run_id = %(run_id)s

-- name: forget_run_labels
DELETE FROM run_labels WHERE tenant_id = %(tenant_id)s AND run_id = %(run_id)s

-- name: forget_span_exports
DELETE FROM span_exports WHERE tenant_id = %(tenant_id)s AND run_id = %(run_id)s

-- name: forget_stream_deltas
DELETE FROM stream_deltas WHERE tenant_id = %(tenant_id)s AND run_id = %(run_id)s

-- name: forget_purged_runs
DELETE FROM purged_runs WHERE tenant_id = %(tenant_id)s AND run_id = %(run_id)s

-- name: forget_runs
DELETE FROM runs WHERE tenant_id = %(tenant_id)s AND run_id = %(run_id)s

-- name: insert_forgotten_run
INSERT INTO forgotten_runs (tenant_id, seq, run_id, last_seq, head, sweep_id, forgotten_at,
                            hash)
VALUES (%(tenant_id)s, %(seq)s, %(run_id)s, %(last_seq)s, %(head)s, %(sweep_id)s,
        %(at)s, %(hash)s)

-- name: forgotten_runs
SELECT tenant_id, seq, run_id, last_seq, head, sweep_id, forgotten_at, hash
  FROM forgotten_runs
 WHERE tenant_id = %(tenant_id)s AND seq > %(after)s
   AND (%(sweep_id)s::text IS NULL OR sweep_id = %(sweep_id)s)
 ORDER BY seq LIMIT %(limit)s

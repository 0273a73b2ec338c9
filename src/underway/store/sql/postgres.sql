-- Named queries for PostgreSQL. Every query on project tables takes the tenant, except the
-- scheduler's cross-tenant ones (claim, held leases, next wake-up, tenants).
-- Placeholders are psycopg's %(name)s, so a literal percent sign is written twice.
-- Run rows are always selected in the field order of RunRecord.

-- name: set_search_path
SELECT set_config('search_path', %(path)s, false)

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

-- name: has_schema_version_table
SELECT to_regclass('underway_schema_version') IS NOT NULL

-- name: schema_version
SELECT COALESCE(MAX(version), 0) FROM underway_schema_version

-- name: record_migration
INSERT INTO underway_schema_version (version, name, applied_at)
VALUES (%(version)s, %(name)s, %(applied_at)s)

-- name: create_run
WITH created AS (
    INSERT INTO runs (tenant_id, run_id, flow, status, step, idempotency_key, last_seq,
                      last_hash, next_wake_at, created_at, updated_at, queue)
    VALUES (%(tenant_id)s, %(run_id)s, %(flow)s, 'ready', %(step)s, %(idempotency_key)s,
            %(seq)s, %(hash)s, %(next_wake_at)s, %(now)s, %(now)s, %(queue)s)
    ON CONFLICT DO NOTHING
    RETURNING tenant_id, run_id, flow, status, step, idempotency_key, last_seq, last_hash,
              next_wake_at, waiting_signal, control_pending, lease_owner, lease_token,
              lease_expires_at, created_at, updated_at, error, queue
), first_event AS (
    INSERT INTO events (tenant_id, run_id, seq, type, payload, hash)
    SELECT tenant_id, run_id, %(seq)s, %(type)s, %(payload)s, %(hash)s FROM created
), first_blobs AS (
    INSERT INTO blobs (tenant_id, key, data)
    SELECT created.tenant_id, b.key, b.data
      FROM created, unnest(%(blob_keys)s::text[], %(blob_data)s::bytea[]) AS b(key, data)
     ORDER BY b.key
    ON CONFLICT DO NOTHING
)
SELECT * FROM created

-- name: find_by_idempotency
SELECT tenant_id, run_id, flow, status, step, idempotency_key, last_seq, last_hash,
       next_wake_at, waiting_signal, control_pending, lease_owner, lease_token,
       lease_expires_at, created_at, updated_at, error, queue
  FROM runs
 WHERE tenant_id = %(tenant_id)s AND flow = %(flow)s AND idempotency_key = %(idempotency_key)s

-- name: get_run
SELECT tenant_id, run_id, flow, status, step, idempotency_key, last_seq, last_hash,
       next_wake_at, waiting_signal, control_pending, lease_owner, lease_token,
       lease_expires_at, created_at, updated_at, error, queue
  FROM runs
 WHERE tenant_id = %(tenant_id)s AND run_id = %(run_id)s

-- name: list_runs
SELECT tenant_id, run_id, flow, status, step, idempotency_key, last_seq, last_hash,
       next_wake_at, waiting_signal, control_pending, lease_owner, lease_token,
       lease_expires_at, created_at, updated_at, error, queue
  FROM runs
 WHERE tenant_id = %(tenant_id)s
 ORDER BY created_at DESC, run_id COLLATE "C"
 LIMIT %(limit)s

-- name: list_runs_by_status
SELECT tenant_id, run_id, flow, status, step, idempotency_key, last_seq, last_hash,
       next_wake_at, waiting_signal, control_pending, lease_owner, lease_token,
       lease_expires_at, created_at, updated_at, error, queue
  FROM runs
 WHERE tenant_id = %(tenant_id)s AND status = %(status)s
 ORDER BY created_at DESC, run_id COLLATE "C"
 LIMIT %(limit)s

-- name: tenants
SELECT DISTINCT tenant_id COLLATE "C" AS tenant_id FROM runs ORDER BY 1

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
-- sequence check, backed by its primary key. When either refuses, the events take their
-- tenant and run from the empty fence, violate NOT NULL, and the error aborts the whole
-- pipelined transaction before anything after it runs.
WITH fence AS (
    SELECT tenant_id, run_id, control_pending FROM runs
     WHERE tenant_id = %(tenant_id)s AND run_id = %(run_id)s
       AND lease_token = %(fence)s AND lease_owner IS NOT NULL
       AND (SELECT COALESCE(MAX(seq), 0) FROM events
             WHERE tenant_id = %(tenant_id)s AND run_id = %(run_id)s) = %(expected_seq)s
       FOR NO KEY UPDATE
), appended AS (
    INSERT INTO events (tenant_id, run_id, seq, type, payload, hash)
    SELECT fence.tenant_id, fence.run_id, e.seq, e.type, e.payload, e.hash
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
       waiting_signal = %(waiting_signal)s, error = %(error)s, updated_at = %(now)s
 WHERE tenant_id = %(tenant_id)s AND run_id = %(run_id)s

-- name: last_seq
SELECT COALESCE(MAX(seq), 0) FROM events
 WHERE tenant_id = %(tenant_id)s AND run_id = %(run_id)s

-- name: insert_blobs
-- Keys in one order everywhere, so two writers sharing blobs cannot deadlock.
INSERT INTO blobs (tenant_id, key, data)
SELECT %(tenant_id)s, b.key, b.data
  FROM unnest(%(keys)s::text[], %(data)s::bytea[]) AS b(key, data)
 ORDER BY b.key
ON CONFLICT DO NOTHING

-- name: upsert_checkpoint
INSERT INTO checkpoints (tenant_id, run_id, seq, state)
VALUES (%(tenant_id)s, %(run_id)s, %(seq)s, %(state)s)
ON CONFLICT (tenant_id, run_id) DO UPDATE SET seq = excluded.seq, state = excluded.state

-- name: consume_signals
UPDATE signals SET consumed = true
 WHERE tenant_id = %(tenant_id)s AND run_id = %(run_id)s AND signal_id = ANY(%(signal_ids)s)

-- name: settle_run
-- After an append: refresh control_pending once control signals were consumed, wake a run
-- that now waits for a signal already in its inbox, and let the lease go. A statement of
-- its own, so it sees every signal committed while the append held the run's row lock.
UPDATE runs
   SET control_pending = CASE
           WHEN %(consumed)s AND control_pending THEN EXISTS (
               SELECT 1 FROM signals s
                WHERE s.tenant_id = runs.tenant_id AND s.run_id = runs.run_id
                  AND NOT s.consumed AND s.name LIKE 'underway.%%')
           ELSE control_pending END,
       next_wake_at = CASE
           WHEN status IN ('completed', 'failed', 'cancelled') THEN next_wake_at
           WHEN waiting_signal IS NOT NULL AND EXISTS (
               SELECT 1 FROM signals s
                WHERE s.tenant_id = runs.tenant_id AND s.run_id = runs.run_id
                  AND s.name = runs.waiting_signal AND NOT s.consumed)
           THEN %(now)s
           -- A control signal (cancel, resolve) that arrived while the step ran must not
           -- wait for the run's timer once the run is handed back.
           WHEN %(release)s AND EXISTS (
               SELECT 1 FROM signals s
                WHERE s.tenant_id = runs.tenant_id AND s.run_id = runs.run_id
                  AND NOT s.consumed AND s.name LIKE 'underway.%%')
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

-- name: load_events
SELECT seq, type, payload, hash FROM events
 WHERE tenant_id = %(tenant_id)s AND run_id = %(run_id)s AND seq > %(after_seq)s
 ORDER BY seq

-- name: claim_due
-- MATERIALIZED: the locking subquery runs exactly once, so LIMIT bounds what is leased.
WITH due AS MATERIALIZED (
    SELECT tenant_id, run_id, next_wake_at FROM runs
     WHERE next_wake_at <= %(now)s
       AND status NOT IN ('completed', 'failed', 'cancelled')
       AND (lease_owner IS NULL OR lease_expires_at < %(now)s)
     ORDER BY next_wake_at
     LIMIT %(limit)s
       FOR UPDATE SKIP LOCKED
)
UPDATE runs
   SET lease_owner = %(owner)s, lease_token = runs.lease_token + 1,
       lease_expires_at = %(expires_at)s
  FROM due
 WHERE runs.tenant_id = due.tenant_id AND runs.run_id = due.run_id
RETURNING runs.tenant_id, runs.run_id, runs.lease_token, due.next_wake_at

-- name: claim_due_of_tenant
WITH due AS MATERIALIZED (
    SELECT tenant_id, run_id, next_wake_at FROM runs
     WHERE tenant_id = %(tenant_id)s AND next_wake_at <= %(now)s
       AND status NOT IN ('completed', 'failed', 'cancelled')
       AND (lease_owner IS NULL OR lease_expires_at < %(now)s)
     ORDER BY next_wake_at
     LIMIT %(limit)s
       FOR UPDATE SKIP LOCKED
)
UPDATE runs
   SET lease_owner = %(owner)s, lease_token = runs.lease_token + 1,
       lease_expires_at = %(expires_at)s
  FROM due
 WHERE runs.tenant_id = due.tenant_id AND runs.run_id = due.run_id
RETURNING runs.tenant_id, runs.run_id, runs.lease_token, due.next_wake_at

-- name: claim_due_run
WITH due AS MATERIALIZED (
    SELECT tenant_id, run_id, next_wake_at FROM runs
     WHERE tenant_id = %(tenant_id)s AND run_id = %(run_id)s AND next_wake_at <= %(now)s
       AND status NOT IN ('completed', 'failed', 'cancelled')
       AND (lease_owner IS NULL OR lease_expires_at < %(now)s)
     LIMIT %(limit)s
       FOR UPDATE SKIP LOCKED
)
UPDATE runs
   SET lease_owner = %(owner)s, lease_token = runs.lease_token + 1,
       lease_expires_at = %(expires_at)s
  FROM due
 WHERE runs.tenant_id = due.tenant_id AND runs.run_id = due.run_id
RETURNING runs.tenant_id, runs.run_id, runs.lease_token, due.next_wake_at

-- name: renew_lease
UPDATE runs SET lease_expires_at = %(expires_at)s
 WHERE tenant_id = %(tenant_id)s AND run_id = %(run_id)s
   AND lease_owner = %(owner)s AND lease_token = %(token)s

-- name: release_lease
UPDATE runs SET lease_owner = NULL, lease_expires_at = NULL
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

-- name: get_blobs
SELECT key, data FROM blobs WHERE tenant_id = %(tenant_id)s AND key = ANY(%(keys)s)

-- name: held_leases
SELECT tenant_id, run_id, lease_owner FROM runs
 WHERE lease_owner IS NOT NULL AND lease_expires_at >= %(now)s

-- name: expire_lease
UPDATE runs SET lease_expires_at = 0
 WHERE tenant_id = %(tenant_id)s AND run_id = %(run_id)s AND lease_owner = %(owner)s

-- name: next_wake_at
SELECT MIN(next_wake_at) FROM runs
 WHERE next_wake_at IS NOT NULL AND status NOT IN ('completed', 'failed', 'cancelled')

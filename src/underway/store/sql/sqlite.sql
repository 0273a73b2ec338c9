-- Named queries for SQLite. Every query takes the tenant.

-- name: schema_version_table
CREATE TABLE IF NOT EXISTS underway_schema_version (
    version    INTEGER PRIMARY KEY,
    name       TEXT NOT NULL,
    applied_at REAL NOT NULL
)

-- name: has_schema_version_table
SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = 'underway_schema_version'

-- name: schema_version
SELECT COALESCE(MAX(version), 0) FROM underway_schema_version

-- name: record_migration
INSERT INTO underway_schema_version (version, name, applied_at) VALUES (?, ?, ?)

-- name: insert_run
INSERT INTO runs (tenant_id, run_id, flow, status, step, idempotency_key, last_seq, last_hash,
                  next_wake_at, created_at, updated_at, queue, subject, purpose)
VALUES (?, ?, ?, 'ready', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT DO NOTHING

-- name: find_by_idempotency
SELECT * FROM runs WHERE tenant_id = ? AND flow = ? AND idempotency_key = ?

-- name: get_run
SELECT * FROM runs WHERE tenant_id = :tenant_id AND run_id = :run_id

-- name: list_runs
-- A page of a tenant's runs, newest first, read in order from the listing index (0008)
-- from the cursor on: the time bounds are always given (infinite when not asked), so they
-- are a range of the index, and the page stops at :limit, however many runs the tenant has.
-- A status, a flow or both have their own query, each on an index in the same order (0025):
-- this one with an equality on them, made by underway.store.queries (list_runs_by_*).
SELECT * FROM runs
 WHERE tenant_id = :tenant_id
   AND created_at >= :since AND created_at < :until AND created_at <= :after_at
   AND (created_at < :after_at OR (created_at = :after_at AND run_id > :after_id))
   AND (:prefix IS NULL OR substr(run_id, 1, length(:prefix)) = :prefix)
   AND (:updated_since IS NULL OR updated_at >= :updated_since)
   AND (:updated_until IS NULL OR updated_at < :updated_until)
   AND (:search IS NULL OR instr(run_id, :search) > 0 OR instr(flow, :search) > 0)
 ORDER BY created_at DESC, run_id
 LIMIT :limit

-- name: list_runs_labelled
-- list_runs of the runs with every label asked, read from the (tenant, key, value) index:
-- the runs of the label with the fewest, each checked for the others on its primary key.
-- So a rare label never scans the tenant's runs, nor a common one's many entries. CROSS
-- JOIN keeps the order written.
WITH wanted AS (
    SELECT k.value AS key, v.value AS value
      FROM json_each(:label_keys) AS k CROSS JOIN json_each(:label_values) AS v
     WHERE v.key = k.key
), rarest AS (
    SELECT key, value FROM wanted
     ORDER BY (SELECT COUNT(*) FROM run_labels AS c
                WHERE c.tenant_id = :tenant_id AND c.key = wanted.key
                  AND c.value = wanted.value)
     LIMIT 1
), matched AS (
    SELECT l.run_id FROM rarest CROSS JOIN run_labels AS l
     WHERE l.tenant_id = :tenant_id AND l.key = rarest.key AND l.value = rarest.value
       AND (SELECT COUNT(*) FROM wanted CROSS JOIN run_labels AS m
             WHERE m.tenant_id = :tenant_id AND m.run_id = l.run_id AND m.key = wanted.key
               AND m.value = wanted.value) = json_array_length(:label_keys)
)
SELECT runs.* FROM matched CROSS JOIN runs
 WHERE runs.tenant_id = :tenant_id AND runs.run_id = matched.run_id
   AND (:status IS NULL OR status = :status)
   AND (:flow IS NULL OR flow = :flow)
   AND (:since IS NULL OR created_at >= :since)
   AND (:until IS NULL OR created_at < :until)
   AND created_at <= coalesce(:after_at, 9e999)
   AND (:after_at IS NULL OR created_at < :after_at
        OR (created_at = :after_at AND runs.run_id > :after_id))
   AND (:prefix IS NULL OR substr(runs.run_id, 1, length(:prefix)) = :prefix)
   AND (:updated_since IS NULL OR updated_at >= :updated_since)
   AND (:updated_until IS NULL OR updated_at < :updated_until)
   AND (:search IS NULL OR instr(runs.run_id, :search) > 0 OR instr(flow, :search) > 0)
 ORDER BY created_at DESC, runs.run_id
 LIMIT :limit

-- name: put_label
INSERT INTO run_labels (tenant_id, run_id, key, value, kind, sensitive)
VALUES (?, ?, ?, ?, ?, ?)
ON CONFLICT (tenant_id, run_id, key) DO UPDATE
   SET value = excluded.value, kind = excluded.kind, sensitive = excluded.sensitive

-- name: run_labels
SELECT run_id, key, value, kind, sensitive FROM run_labels
 WHERE tenant_id = :tenant_id AND run_id IN (SELECT value FROM json_each(:run_ids))
 ORDER BY run_id, key

-- name: delete_labels_of_run
DELETE FROM run_labels WHERE tenant_id = ? AND run_id = ?

-- name: runs_of_subject
SELECT * FROM runs
 WHERE tenant_id = :tenant_id AND subject = :subject
 ORDER BY created_at, run_id
 LIMIT coalesce(:limit, -1)

-- name: tenants
SELECT DISTINCT tenant_id FROM runs ORDER BY tenant_id

-- name: run_counts
-- The counts the runs' triggers keep (migration 0027); the last column is how many rows
-- were summed.
SELECT tenant_id, status, SUM(n), COUNT(*) FROM run_counts
 GROUP BY 1, 2 HAVING SUM(n) <> 0 ORDER BY 1, 2

-- name: request_counts
-- Runs that wait for a person, from the counts the runs' triggers keep (migration 0027).
SELECT tenant_id, kind, SUM(n) FROM run_counts
 WHERE kind <> '' AND status IN ('waiting', 'escalated')
 GROUP BY 1, 2 HAVING SUM(n) <> 0 ORDER BY 1, 2

-- name: run_counts_fold
-- One slot a key on SQLite: nothing to fold.
SELECT 1 WHERE 0

-- name: run_counts_drop_zeros
DELETE FROM run_counts WHERE n = 0

-- name: status_counts
-- Each status's runs counted up to :cap on the (tenant, status) index: a flat cost.
SELECT s.value, (SELECT COUNT(*) FROM (SELECT 1 FROM runs
                                        WHERE tenant_id = :tenant_id AND status = s.value
                                        ORDER BY created_at DESC
                                        LIMIT :cap))
  FROM json_each(:statuses) AS s

-- name: runs_created
-- Bucket numbers are never negative here, so CAST (which truncates) is floor.
SELECT CAST((created_at - :since) / :width AS INTEGER) AS bucket, status, COUNT(*)
  FROM runs
 WHERE tenant_id = :tenant_id AND created_at >= :since AND created_at < :until
 GROUP BY 1, 2 ORDER BY 1, 2

-- name: runs_written
SELECT run_id FROM runs
 WHERE tenant_id = :tenant_id AND updated_at >= :since AND created_at < :until
UNION
SELECT run_id FROM runs
 WHERE tenant_id = :tenant_id AND lease_owner IS NOT NULL AND created_at < :until
ORDER BY 1

-- name: events_by_type
SELECT run_id, seq, type, payload, lower(hex(hash)) AS hash FROM events
 WHERE tenant_id = :tenant_id
   AND run_id IN (SELECT value FROM json_each(:runs))
   AND type IN (SELECT value FROM json_each(:types))
 ORDER BY run_id, seq

-- name: checkpoints_with_tails
-- Each run's checkpoint with the events from its seq on, in one statement (one snapshot).
SELECT c.run_id, c.seq, c.state, e.seq, e.type, e.payload, lower(hex(e.hash)) AS hash
  FROM checkpoints c
  JOIN events e ON e.tenant_id = c.tenant_id AND e.run_id = c.run_id AND e.seq >= c.seq
 WHERE c.tenant_id = :tenant_id
   AND c.run_id IN (SELECT value FROM json_each(:runs))
 ORDER BY c.run_id, e.seq

-- name: checkpoint_before
-- A run's newest checkpoint before :seq (the current one, or one it replaced, kept in
-- checkpoint_history by migration 0026) with the events from its seq through :seq;
-- the state on the first row only. The seq is found on the primary keys alone.
WITH found AS (
    SELECT max(seq) AS seq FROM (
        SELECT seq FROM checkpoints
         WHERE tenant_id = :tenant_id AND run_id = :run_id AND seq < :seq
        UNION ALL
        SELECT max(seq) FROM checkpoint_history
         WHERE tenant_id = :tenant_id AND run_id = :run_id AND seq < :seq)
), c AS (
    SELECT seq, state FROM checkpoints
     WHERE tenant_id = :tenant_id AND run_id = :run_id AND seq = (SELECT seq FROM found)
    UNION ALL
    SELECT seq, state FROM checkpoint_history
     WHERE tenant_id = :tenant_id AND run_id = :run_id AND seq = (SELECT seq FROM found)
    LIMIT 1
)
SELECT c.seq, CASE WHEN e.seq = c.seq THEN c.state END, e.seq, e.type, e.payload,
       lower(hex(e.hash)) AS hash
  FROM c JOIN events e ON e.tenant_id = :tenant_id AND e.run_id = :run_id
                      AND e.seq >= c.seq AND e.seq <= :seq
 ORDER BY e.seq

-- name: fork_parent
-- What forking a run checks of its parent, in the fork's transaction: its lease and its
-- journal's head.
SELECT lease_owner, lease_expires_at,
       (SELECT COALESCE(MAX(seq), 0) FROM events e
         WHERE e.tenant_id = runs.tenant_id AND e.run_id = runs.run_id) AS last_seq
  FROM runs WHERE tenant_id = ? AND run_id = ?

-- name: advance_head
-- The parent of a fork: its row's head follows the event the fork appended.
UPDATE runs SET last_seq = ?, last_hash = ?, updated_at = ? WHERE tenant_id = ? AND run_id = ?

-- name: journaled_runs
SELECT tenant_id, run_id FROM runs
UNION
SELECT DISTINCT tenant_id, run_id FROM events
ORDER BY 1, 2

-- name: journaled_runs_of_tenant
SELECT tenant_id, run_id FROM runs WHERE tenant_id = :tenant_id
UNION
SELECT DISTINCT tenant_id, run_id FROM events WHERE tenant_id = :tenant_id
ORDER BY 1, 2

-- name: journal_heads
SELECT e.tenant_id, e.run_id, e.seq, lower(hex(e.hash)) AS hash
  FROM events e
  JOIN (SELECT tenant_id, run_id, MAX(seq) AS seq FROM events GROUP BY tenant_id, run_id) h
    ON e.tenant_id = h.tenant_id AND e.run_id = h.run_id AND e.seq = h.seq
 ORDER BY 1, 2

-- name: journal_heads_of_tenant
SELECT e.tenant_id, e.run_id, e.seq, lower(hex(e.hash)) AS hash
  FROM events e
  JOIN (SELECT tenant_id, run_id, MAX(seq) AS seq FROM events WHERE tenant_id = :tenant_id
         GROUP BY tenant_id, run_id) h
    ON e.tenant_id = h.tenant_id AND e.run_id = h.run_id AND e.seq = h.seq
 ORDER BY 1, 2

-- name: insert_event
INSERT INTO events (tenant_id, run_id, seq, type, payload, hash)
VALUES (?, ?, ?, ?, ?, unhex(?))

-- name: insert_blob
-- written_at by the database's clock; a blob sent again is marked written again only when
-- its mark is over a day old (BLOB_REFRESH), so a resend rarely rewrites the row.
INSERT INTO blobs (tenant_id, key, data, written_at)
VALUES (?, ?, ?, (julianday('now') - 2440587.5) * 86400.0)
ON CONFLICT (tenant_id, key) DO UPDATE SET written_at = excluded.written_at
 WHERE blobs.written_at < excluded.written_at - 86400

-- name: circuit_get
SELECT failures, open_until, trial_until FROM circuits WHERE tenant_id = ? AND name = ?

-- name: circuit_start_trial
UPDATE circuits SET trial_until = ?, updated_at = ? WHERE tenant_id = ? AND name = ?

-- name: circuit_put
INSERT INTO circuits (tenant_id, name, failures, open_until, trial_until, updated_at)
VALUES (?, ?, ?, ?, NULL, ?)
ON CONFLICT (tenant_id, name) DO UPDATE
   SET failures = excluded.failures, open_until = excluded.open_until, trial_until = NULL,
       updated_at = excluded.updated_at

-- name: put_blob_chunk
-- A chunk written again (a retry after a crash) replaces the one before and is marked
-- written now, so the blob collector spares it while its blob's row is on its way.
INSERT INTO blob_chunks (tenant_id, key, idx, data, written_at)
VALUES (:tenant_id, :key, :idx, :data, (julianday('now') - 2440587.5) * 86400.0)
ON CONFLICT (tenant_id, key, idx) DO UPDATE
   SET data = excluded.data, written_at = excluded.written_at

-- name: get_blob_chunk
SELECT data FROM blob_chunks WHERE tenant_id = :tenant_id AND key = :key AND idx = :idx

-- name: get_blobs
SELECT key, data FROM blobs
WHERE tenant_id = :tenant_id AND key IN (SELECT value FROM json_each(:keys))

-- name: get_blob_chain
-- A blob and the blobs it links to: one whose bytes begin {"p":" (a codec list node)
-- links to the key in the 64 bytes after that. Sealed (encrypted) blobs link nowhere.
WITH RECURSIVE chain(key, data, depth) AS (
    SELECT key, data, 1 FROM blobs WHERE tenant_id = :tenant_id AND key = :key
    UNION ALL
    SELECT b.key, b.data, chain.depth + 1
    FROM chain JOIN blobs AS b
        ON b.tenant_id = :tenant_id AND b.key = CAST(substr(chain.data, 7, 64) AS TEXT)
    WHERE chain.depth < :limit AND substr(chain.data, 1, 6) = CAST('{"p":"' AS BLOB)
)
SELECT key, data FROM chain

-- name: advance_run
UPDATE runs
   SET last_seq = ?, last_hash = ?, status = ?, step = ?, next_wake_at = ?, waiting_signal = ?,
       error = ?, request_kind = ?, updated_at = ?
 WHERE tenant_id = ? AND run_id = ?

-- name: fence
-- What an append checks, in one read: the lease and the journal's head.
SELECT lease_token, lease_owner, control_pending,
       (SELECT COALESCE(MAX(seq), 0) FROM events e
         WHERE e.tenant_id = runs.tenant_id AND e.run_id = runs.run_id) AS last_seq
  FROM runs WHERE tenant_id = ? AND run_id = ?

-- name: release_after_append
UPDATE runs SET lease_owner = NULL, lease_expires_at = NULL WHERE tenant_id = ? AND run_id = ?

-- name: upsert_checkpoint
INSERT INTO checkpoints (tenant_id, run_id, seq, state) VALUES (?, ?, ?, ?)
ON CONFLICT (tenant_id, run_id) DO UPDATE SET seq = excluded.seq, state = excluded.state

-- name: load_checkpoint
SELECT seq, state FROM checkpoints WHERE tenant_id = :tenant_id AND run_id = :run_id

-- name: delete_checkpoints_of_run
DELETE FROM checkpoints WHERE tenant_id = :tenant_id AND run_id = :run_id

-- name: delete_checkpoints_of_tenant
DELETE FROM checkpoints WHERE tenant_id = :tenant_id

-- name: kept_checkpoints
-- A run's checkpoints a newer one replaced (migration 0026), oldest first: the blob
-- collector follows what they refer to.
SELECT seq, state FROM checkpoint_history
 WHERE tenant_id = :tenant_id AND run_id = :run_id ORDER BY seq

-- name: load_events
SELECT seq, type, payload, lower(hex(hash)) AS hash FROM events
 WHERE tenant_id = :tenant_id AND run_id = :run_id AND seq > :after_seq ORDER BY seq
 LIMIT :page

-- name: queue_limits
-- The limits of the queues a claim may take runs from (every queue when :queues is NULL;
-- else a JSON array of names). BEGIN IMMEDIATE already makes claims take turns.
SELECT name, max_concurrency, rate_limit, rate_period_s, per_tenant FROM queues
 WHERE (:queues IS NULL OR name IN (SELECT value FROM json_each(:queues)))
   AND (max_concurrency IS NOT NULL OR rate_limit IS NOT NULL)
 ORDER BY name

-- name: leased_per_queue
SELECT queue, count(*) FROM runs
 WHERE queue IN (SELECT value FROM json_each(:queues))
   AND lease_owner IS NOT NULL AND lease_expires_at >= :now
 GROUP BY queue

-- name: queue_buckets
SELECT queue, tenant_id, tokens, updated_at FROM queue_buckets
 WHERE queue IN (SELECT value FROM json_each(:queues))

-- name: claim_candidates
-- Due runs nobody holds, in tenant-fair order: every tenant's first turn, then every
-- tenant's second, and so on, where the runs a tenant already has in flight count as turns
-- taken; so one tenant's backlog cannot starve another, even when claims take one run at
-- a time and the backlog is older than the other tenant's runs. The pairs walk visits
-- each (queue, tenant) with scheduled runs once, by index, and reads only its first
-- :window due runs, so the cost does not grow with a tenant's backlog. Queues at their
-- concurrency limit (:full, a JSON array), and first activations (lease_token 0) whose
-- rate bucket is empty (:empty, a JSON array of [queue, tenant or '*']), are left out.
WITH RECURSIVE pairs(queue, tenant_id) AS (
    SELECT * FROM (SELECT queue, tenant_id FROM runs WHERE next_wake_at IS NOT NULL
                    ORDER BY queue, tenant_id LIMIT 1)
    UNION ALL
    -- The next tenant of the same queue, else the first tenant of the next queue; spelled
    -- as single-column seeks, which SQLite's index search handles (a row-value bound it
    -- would apply to the first column only).
    SELECT CASE WHEN EXISTS (SELECT 1 FROM runs
                              WHERE queue = p.queue AND tenant_id > p.tenant_id
                                AND next_wake_at IS NOT NULL)
                THEN p.queue
                ELSE (SELECT queue FROM runs WHERE queue > p.queue AND next_wake_at IS NOT NULL
                       ORDER BY queue LIMIT 1) END,
           coalesce(
               (SELECT tenant_id FROM runs
                 WHERE queue = p.queue AND tenant_id > p.tenant_id AND next_wake_at IS NOT NULL
                 ORDER BY tenant_id LIMIT 1),
               (SELECT n.tenant_id FROM runs AS n
                 WHERE n.next_wake_at IS NOT NULL AND n.queue = (
                       SELECT queue FROM runs WHERE queue > p.queue AND next_wake_at IS NOT NULL
                        ORDER BY queue LIMIT 1)
                 ORDER BY n.tenant_id LIMIT 1))
      FROM pairs AS p WHERE p.queue IS NOT NULL
), flying(tenant_id, runs) AS MATERIALIZED (
    SELECT tenant_id, count(*) FROM runs
     WHERE lease_owner IS NOT NULL AND lease_expires_at >= :now
       AND (:queues IS NULL OR queue IN (SELECT value FROM json_each(:queues)))
     GROUP BY tenant_id
), due AS (
    SELECT r.tenant_id, r.run_id, r.queue, r.lease_token, r.next_wake_at,
           row_number() OVER (PARTITION BY r.tenant_id ORDER BY r.next_wake_at, r.run_id)
           + coalesce(f.runs, 0) AS turn
      FROM pairs AS p JOIN runs AS r ON r.rowid IN (
        SELECT x.rowid FROM runs AS x
         WHERE x.queue = p.queue AND x.tenant_id = p.tenant_id
           AND x.next_wake_at IS NOT NULL AND x.next_wake_at <= :now
           AND x.status NOT IN ('completed', 'failed', 'cancelled')
           AND (x.lease_owner IS NULL OR x.lease_expires_at < :now)
           AND (:run_id IS NULL OR x.run_id = :run_id)
           AND NOT (x.lease_token = 0 AND EXISTS (
                   SELECT 1 FROM json_each(:empty) AS e
                    WHERE json_extract(e.value, '$[0]') = x.queue
                      AND json_extract(e.value, '$[1]') IN ('*', x.tenant_id)))
         ORDER BY x.next_wake_at LIMIT :window)
      LEFT JOIN flying AS f ON f.tenant_id = r.tenant_id
     WHERE p.queue IS NOT NULL
       AND (:queues IS NULL OR p.queue IN (SELECT value FROM json_each(:queues)))
       AND p.queue NOT IN (SELECT value FROM json_each(:full))
       AND (:tenant_id IS NULL OR p.tenant_id = :tenant_id)
)
SELECT tenant_id, run_id, queue, lease_token FROM due
 ORDER BY turn, next_wake_at, tenant_id, run_id
 LIMIT :limit

-- name: claim_run
-- A claim told which run to take: the run's row, found by its key and leased when it is
-- due, unfinished, held by nobody, of the queues and its queue has no limits; one statement
-- instead of the tenant-fair search (a run of a limited queue is left to that search).
UPDATE runs SET lease_owner = :owner, lease_token = lease_token + 1,
       lease_expires_at = :expires_at
 WHERE tenant_id = :tenant_id AND run_id = :run_id
   AND next_wake_at IS NOT NULL AND next_wake_at <= :now
   AND status NOT IN ('completed', 'failed', 'cancelled')
   AND (lease_owner IS NULL OR lease_expires_at < :now)
   AND (:queues IS NULL OR queue IN (SELECT value FROM json_each(:queues)))
   AND NOT EXISTS (SELECT 1 FROM queues AS q WHERE q.name = runs.queue
                     AND (q.max_concurrency IS NOT NULL OR q.rate_limit IS NOT NULL))
RETURNING lease_token

-- name: put_bucket
INSERT INTO queue_buckets (queue, tenant_id, tokens, updated_at) VALUES (?, ?, ?, ?)
ON CONFLICT (queue, tenant_id) DO UPDATE
   SET tokens = excluded.tokens, updated_at = excluded.updated_at

-- name: next_due_at
-- A wake time that is no number (SQLite keeps text written by hand) is nobody's next
-- wake-up: the worker's row check heals it from the journal (underway.projection).
SELECT MIN(next_wake_at) FROM runs
 WHERE next_wake_at IS NOT NULL AND status NOT IN ('completed', 'failed', 'cancelled')
   AND typeof(next_wake_at) IN ('integer', 'real')
   AND (lease_owner IS NULL OR lease_expires_at < :now)
   AND (:queues IS NULL OR queue IN (SELECT value FROM json_each(:queues)))

-- name: set_queue
INSERT INTO queues (name, max_concurrency, rate_limit, rate_period_s, per_tenant, updated_at)
VALUES (:name, :max_concurrency, :rate_limit, :rate_period_s, :per_tenant, :now)
ON CONFLICT (name) DO UPDATE
   SET max_concurrency = excluded.max_concurrency, rate_limit = excluded.rate_limit,
       rate_period_s = excluded.rate_period_s, per_tenant = excluded.per_tenant,
       updated_at = excluded.updated_at

-- name: reset_queue_buckets
DELETE FROM queue_buckets WHERE queue = :name

-- name: list_queues
SELECT name, max_concurrency, rate_limit, rate_period_s, per_tenant FROM queues ORDER BY name

-- name: delete_queue
DELETE FROM queues WHERE name = :name

-- name: take_lease
UPDATE runs SET lease_owner = ?, lease_token = lease_token + 1, lease_expires_at = ?
 WHERE tenant_id = ? AND run_id = ?
RETURNING lease_token

-- name: has_signals
-- The signals reads name their partial index (0023): without statistics the planner would
-- walk the primary key, through every signal the run ever consumed.
SELECT 1 FROM signals INDEXED BY signals_waiting
 WHERE tenant_id = ? AND run_id = ? AND consumed = 0 LIMIT 1

-- name: renew_lease
UPDATE runs SET lease_expires_at = :expires_at
 WHERE tenant_id = :tenant_id AND run_id = :run_id AND lease_owner = :owner AND lease_token = :token

-- name: release_lease
UPDATE runs SET lease_owner = NULL, lease_expires_at = NULL
 WHERE tenant_id = :tenant_id AND run_id = :run_id AND lease_owner = :owner AND lease_token = :token

-- name: release_lease_until
-- A run handed back after a failure is not due again before retry_at: never claimed in a loop.
UPDATE runs SET lease_owner = NULL, lease_expires_at = NULL,
       next_wake_at = MAX(COALESCE(next_wake_at, :retry_at), :retry_at)
 WHERE tenant_id = :tenant_id AND run_id = :run_id AND lease_owner = :owner AND lease_token = :token

-- name: insert_signal
INSERT INTO signals (tenant_id, run_id, signal_id, name, payload, sender, created_at)
VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING

-- name: wake_for_signal
UPDATE runs SET next_wake_at = ?, control_pending = control_pending OR (? LIKE 'underway.%')
 WHERE tenant_id = ? AND run_id = ? AND status NOT IN ('completed', 'failed', 'cancelled')
   AND (waiting_signal = ? OR ? LIKE 'underway.%')

-- name: pending_signals
SELECT tenant_id, run_id, signal_id, name, payload, sender, created_at
  FROM signals INDEXED BY signals_waiting
 WHERE tenant_id = :tenant_id AND run_id = :run_id AND consumed = 0 ORDER BY created_at, signal_id

-- name: actionable_signals
-- What an activation acts on, oldest first: every control signal, and the oldest signal
-- named :waiting (NULL: none). Each half walks its own partial index of unconsumed signals,
-- so the read costs the rows it returns: never the signals the run consumed, nor those it
-- leaves unread.
SELECT * FROM (
    SELECT tenant_id, run_id, signal_id, name, payload, sender, created_at
      FROM signals INDEXED BY signals_control
     WHERE tenant_id = :tenant_id AND run_id = :run_id AND consumed = 0
       AND name LIKE 'underway.%'
    UNION ALL
    SELECT * FROM (
        SELECT tenant_id, run_id, signal_id, name, payload, sender, created_at
          FROM signals INDEXED BY signals_waiting
         WHERE tenant_id = :tenant_id AND run_id = :run_id AND consumed = 0
           AND name = :waiting
         ORDER BY created_at, signal_id LIMIT 1))
 ORDER BY created_at, signal_id

-- name: consume_signal
UPDATE signals SET consumed = 1 WHERE tenant_id = ? AND run_id = ? AND signal_id = ?

-- name: wake_if_signal_pending
UPDATE runs SET next_wake_at = ?
 WHERE tenant_id = ? AND run_id = ? AND status NOT IN ('completed', 'failed', 'cancelled')
   AND (control_pending = 1
        OR (waiting_signal IS NOT NULL
            AND EXISTS (SELECT 1 FROM signals AS s INDEXED BY signals_waiting
                         WHERE s.tenant_id = runs.tenant_id AND s.run_id = runs.run_id
                           AND s.name = runs.waiting_signal AND s.consumed = 0)))

-- name: refresh_control_pending
UPDATE runs SET control_pending = EXISTS (
        SELECT 1 FROM signals AS s INDEXED BY signals_control
         WHERE s.tenant_id = runs.tenant_id AND s.run_id = runs.run_id
           AND s.consumed = 0 AND s.name LIKE 'underway.%')
 WHERE tenant_id = ? AND run_id = ?

-- name: held_leases
SELECT tenant_id, run_id, lease_owner FROM runs
 WHERE lease_owner IS NOT NULL AND lease_expires_at >= :now

-- name: expire_lease
UPDATE runs SET lease_expires_at = 0 WHERE tenant_id = :tenant_id AND run_id = :run_id AND lease_owner = :owner

-- name: next_wake_at
SELECT MIN(next_wake_at) FROM runs
 WHERE next_wake_at IS NOT NULL AND status NOT IN ('completed', 'failed', 'cancelled')
   AND typeof(next_wake_at) IN ('integer', 'real')

-- name: suspect_runs
-- Rows that would stop their run for good if the journal contradicts them (see
-- LeaseStore.suspect_runs): each is folded and compared by underway.projection.
SELECT tenant_id, run_id FROM runs AS r
 WHERE (next_wake_at IS NOT NULL AND (typeof(next_wake_at) NOT IN ('integer', 'real')
                                      OR abs(next_wake_at) > 1e300))
    OR (lease_expires_at IS NOT NULL AND (typeof(lease_expires_at) NOT IN ('integer', 'real')
                                          OR abs(lease_expires_at) > 1e300))
    OR (lease_owner IS NOT NULL AND (lease_expires_at IS NULL OR lease_expires_at > :horizon))
    OR (status IN ('completed', 'failed', 'cancelled') AND NOT EXISTS (
            SELECT 1 FROM events AS e
             WHERE e.tenant_id = r.tenant_id AND e.run_id = r.run_id AND e.seq = r.last_seq
               AND e.type IN ('RunCompleted', 'RunFailed', 'RunCancelled')))
    OR (next_wake_at IS NULL AND status NOT IN ('completed', 'failed', 'cancelled')
        AND (lease_owner IS NULL OR lease_expires_at < :now)
        AND (status = 'ready' OR EXISTS (
            SELECT 1 FROM events AS e
             WHERE e.tenant_id = r.tenant_id AND e.run_id = r.run_id AND e.seq = r.last_seq
               AND e.type = 'TimerSet')))
 ORDER BY tenant_id, run_id
 LIMIT :limit

-- name: suspect_runs_since
-- The suspect rows among those written at or after :since: a look that reads only what
-- changed since the last look. The window is read first, on runs_updated (migration
-- 0029); ordered by the primary key under a limit, the whole table would be walked.
WITH recent AS MATERIALIZED (
    SELECT tenant_id, run_id, status, last_seq, next_wake_at, lease_owner, lease_expires_at
      FROM runs WHERE updated_at >= :since
)
SELECT tenant_id, run_id FROM recent AS r
 WHERE (next_wake_at IS NOT NULL AND (typeof(next_wake_at) NOT IN ('integer', 'real')
                                      OR abs(next_wake_at) > 1e300))
    OR (lease_expires_at IS NOT NULL AND (typeof(lease_expires_at) NOT IN ('integer', 'real')
                                          OR abs(lease_expires_at) > 1e300))
    OR (lease_owner IS NOT NULL AND (lease_expires_at IS NULL OR lease_expires_at > :horizon))
    OR (status IN ('completed', 'failed', 'cancelled') AND NOT EXISTS (
            SELECT 1 FROM events AS e
             WHERE e.tenant_id = r.tenant_id AND e.run_id = r.run_id AND e.seq = r.last_seq
               AND e.type IN ('RunCompleted', 'RunFailed', 'RunCancelled')))
    OR (next_wake_at IS NULL AND status NOT IN ('completed', 'failed', 'cancelled')
        AND (lease_owner IS NULL OR lease_expires_at < :now)
        AND (status = 'ready' OR EXISTS (
            SELECT 1 FROM events AS e
             WHERE e.tenant_id = r.tenant_id AND e.run_id = r.run_id AND e.seq = r.last_seq
               AND e.type = 'TimerSet')))
 ORDER BY tenant_id, run_id
 LIMIT :limit

-- name: repair_run
-- A row rewritten from its journal, only while it is as it was read and the journal's
-- head has not moved; with :token, the lease of that token is released with it.
UPDATE runs
   SET last_seq = :head_seq, last_hash = :head_hash, status = :status, step = :step,
       next_wake_at = :wake, waiting_signal = :waiting_signal, error = :error,
       request_kind = :request_kind,
       lease_owner = CASE WHEN :clear OR :token IS NOT NULL THEN NULL ELSE lease_owner END,
       lease_expires_at = CASE WHEN :clear OR :token IS NOT NULL THEN NULL
                               ELSE lease_expires_at END,
       updated_at = :now
 WHERE tenant_id = :tenant_id AND run_id = :run_id AND lease_token = :seen_token
   AND last_seq = :seen_seq AND status = :seen_status
   AND (:token IS NULL OR lease_owner IS NOT NULL)
   AND (SELECT COALESCE(MAX(seq), 0) FROM events AS e
         WHERE e.tenant_id = :tenant_id AND e.run_id = :run_id) = :head_seq

-- Schedules and intake (migration 0004). Claiming schedules and finding the next one due
-- span tenants, like claiming runs.

-- name: put_schedule
-- An unchanged cron expression and zone keep the pending tick, so declaring the same
-- schedule again (say, at every deploy) never skips a tick that is due.
INSERT INTO schedules (tenant_id, name, flow, cron, timezone, input, queue, next_fire_at,
                       enabled, created_at)
VALUES (:tenant_id, :schedule, :flow, :cron, :timezone, :input, :queue, :next_fire_at, :enabled, :created_at)
ON CONFLICT (tenant_id, name) DO UPDATE
   SET flow = excluded.flow, cron = excluded.cron, timezone = excluded.timezone,
       input = excluded.input, queue = excluded.queue, enabled = excluded.enabled,
       next_fire_at = CASE
           WHEN schedules.cron = excluded.cron AND schedules.timezone = excluded.timezone
                AND schedules.enabled = 1 THEN schedules.next_fire_at
           ELSE excluded.next_fire_at END
RETURNING tenant_id, name, flow, cron, timezone, input, queue, next_fire_at, enabled,
          created_at, last_fired_at, claimed_until

-- name: get_schedule
SELECT tenant_id, name, flow, cron, timezone, input, queue, next_fire_at, enabled,
       created_at, last_fired_at, claimed_until
  FROM schedules WHERE tenant_id = :tenant_id AND name = :schedule

-- name: list_schedules
SELECT tenant_id, name, flow, cron, timezone, input, queue, next_fire_at, enabled,
       created_at, last_fired_at, claimed_until
  FROM schedules WHERE tenant_id = :tenant_id ORDER BY name

-- name: delete_schedule
DELETE FROM schedules WHERE tenant_id = :tenant_id AND name = :schedule

-- name: claim_schedules
-- Runs under BEGIN IMMEDIATE: no other writer sees the rows between choosing and marking.
UPDATE schedules SET claimed_until = ?
 WHERE (tenant_id, name) IN (
        SELECT tenant_id, name FROM schedules
         WHERE enabled = 1 AND next_fire_at <= ?
           AND (claimed_until IS NULL OR claimed_until < ?)
           AND flow IN (SELECT value FROM json_each(?))
         ORDER BY next_fire_at LIMIT ?)
RETURNING tenant_id, name, flow, cron, timezone, input, queue, next_fire_at, enabled,
          created_at, last_fired_at, claimed_until

-- name: advance_schedule
UPDATE schedules
   SET next_fire_at = :next_fire_at, last_fired_at = COALESCE(:fired_at, last_fired_at), claimed_until = NULL
 WHERE tenant_id = :tenant_id AND name = :schedule AND next_fire_at = :expected

-- name: next_schedule_at
SELECT MIN(next_fire_at) FROM schedules
 WHERE enabled = 1 AND (claimed_until IS NULL OR claimed_until < :now)
   AND flow IN (SELECT value FROM json_each(:flows))

-- name: get_intake
SELECT tenant_id, idempotency_key, entity_id, event_type, action, run_id, created_at
  FROM intake WHERE tenant_id = :tenant_id AND idempotency_key = :idempotency_key

-- name: insert_intake
INSERT INTO intake (tenant_id, idempotency_key, entity_id, event_type, action, run_id,
                    created_at)
VALUES (?, ?, ?, ?, ?, ?, ?)

-- name: entity_owner
-- Ownership ends when the run finishes; the row stays until a new owner replaces it.
SELECT o.run_id FROM intake_owners o
  JOIN runs r ON r.tenant_id = o.tenant_id AND r.run_id = o.run_id
 WHERE o.tenant_id = :tenant_id AND o.entity_id = :entity_id
   AND r.status NOT IN ('completed', 'failed', 'cancelled')

-- name: set_entity_owner
INSERT INTO intake_owners (tenant_id, entity_id, run_id, since) VALUES (?, ?, ?, ?)
ON CONFLICT (tenant_id, entity_id) DO UPDATE SET run_id = excluded.run_id, since = excluded.since

-- Approvers and decision nonces (migration 0006). Roles are a JSON array of strings.

-- name: put_approver
-- Registering an approver again replaces its key and roles and lifts any revocation.
INSERT INTO approvers (tenant_id, approver_id, public_key, roles, created_at, revoked_at)
VALUES (:tenant_id, :approver_id, :public_key, :roles, :created_at, :revoked_at)
ON CONFLICT (tenant_id, approver_id) DO UPDATE
   SET public_key = excluded.public_key, roles = excluded.roles,
       created_at = excluded.created_at, revoked_at = excluded.revoked_at

-- name: get_approver
SELECT tenant_id, approver_id, public_key, roles, created_at, revoked_at
  FROM approvers WHERE tenant_id = :tenant_id AND approver_id = :approver_id

-- name: list_approvers
SELECT tenant_id, approver_id, public_key, roles, created_at, revoked_at
  FROM approvers WHERE tenant_id = :tenant_id ORDER BY approver_id

-- name: revoke_approver
-- The first revocation's time stands.
UPDATE approvers SET revoked_at = :at
 WHERE tenant_id = :tenant_id AND approver_id = :approver_id AND revoked_at IS NULL

-- name: use_nonce
-- The primary key makes a nonce usable once per tenant, whoever races for it.
INSERT INTO approval_nonces (tenant_id, nonce, run_id, request_id, used_at)
VALUES (?, ?, ?, ?, ?)
ON CONFLICT (tenant_id, nonce) DO NOTHING

-- name: nonce_owner
SELECT run_id, request_id FROM approval_nonces WHERE tenant_id = ? AND nonce = ?

-- name: knowledge_get
-- Knowledge base (underway.knowledge): long-term memory, kept apart from run state. Every
-- knowledge_ query belongs to it. knowledge_fts indexes knowledge.terms (the words the code
-- split the text into, or their blind terms) as external content: whoever changes a row's
-- terms removes the old ones ('delete' command, with the stored terms) and adds the new.
SELECT seq, tenant_id, id, text, source, created_at, expires_at, roles, sensitivity, metadata,
       sealed, terms, subject
  FROM knowledge WHERE tenant_id = :tenant_id AND id = :id

-- name: knowledge_upsert
INSERT INTO knowledge (tenant_id, id, text, source, created_at, expires_at, roles,
                       sensitivity, metadata, sealed, terms, subject)
VALUES (:tenant_id, :id, :text, :source, :created_at, :expires_at, :roles, :sensitivity,
        :metadata, :sealed, :terms, :subject)
ON CONFLICT (tenant_id, id) DO UPDATE
   SET text = excluded.text, source = excluded.source, created_at = excluded.created_at,
       expires_at = excluded.expires_at, roles = excluded.roles,
       sensitivity = excluded.sensitivity, metadata = excluded.metadata,
       sealed = excluded.sealed, terms = excluded.terms, subject = excluded.subject
RETURNING seq

-- name: knowledge_index
INSERT INTO knowledge_fts (rowid, terms) VALUES (:seq, :terms)

-- name: knowledge_unindex
INSERT INTO knowledge_fts (knowledge_fts, rowid, terms) VALUES ('delete', :seq, :terms)

-- name: knowledge_batch
-- A batch of rows to index again (KnowledgeBase.reindex), in seq order after :after.
SELECT seq, tenant_id, id, text, sealed, terms
  FROM knowledge
 WHERE seq > :after AND (:tenant_id IS NULL OR tenant_id = :tenant_id)
 ORDER BY seq
 LIMIT :limit

-- name: knowledge_row_at
SELECT text, sealed, terms FROM knowledge WHERE seq = :seq

-- name: knowledge_set_terms
UPDATE knowledge SET terms = :terms WHERE seq = :seq

-- name: knowledge_delete
DELETE FROM knowledge WHERE seq = :seq

-- name: knowledge_unindex_expired
INSERT INTO knowledge_fts (knowledge_fts, rowid, terms)
SELECT 'delete', seq, terms FROM knowledge WHERE expires_at <= :now

-- name: knowledge_purge_expired
DELETE FROM knowledge WHERE expires_at <= :now

-- name: knowledge_unindex_subject
INSERT INTO knowledge_fts (knowledge_fts, rowid, terms)
SELECT 'delete', seq, terms FROM knowledge WHERE tenant_id = :tenant_id AND subject = :subject

-- name: knowledge_delete_subject
DELETE FROM knowledge WHERE tenant_id = :tenant_id AND subject = :subject

-- name: knowledge_search
-- Every filter is applied before LIMIT, so hidden records never crowd out visible ones.
-- bm25() is lower for better matches.
SELECT k.seq, k.tenant_id, k.id, k.text, k.source, k.created_at, k.expires_at, k.roles,
       k.sensitivity, k.metadata, -bm25(knowledge_fts) AS score, k.sealed, k.subject
  FROM knowledge_fts JOIN knowledge k ON k.seq = knowledge_fts.rowid
 WHERE knowledge_fts MATCH :match AND k.tenant_id = :tenant_id
   AND (k.expires_at IS NULL OR k.expires_at > :now)
   AND k.sensitivity IN (SELECT value FROM json_each(:sensitivities))
   AND (k.roles = '[]' OR EXISTS (
         SELECT 1 FROM json_each(k.roles) AS r
          WHERE r.value IN (SELECT value FROM json_each(:roles))))
 ORDER BY score DESC, k.created_at DESC, k.id
 LIMIT :limit

-- API keys, intake webhook secrets and the access log (migrations 0009, 0011).

-- name: insert_api_key
INSERT INTO api_keys (key_id, tenant_id, role, name, token_hash, created_at, revoked_at)
VALUES (:key_id, :tenant_id, :role, :name, :token_hash, :created_at, :revoked_at)
ON CONFLICT DO NOTHING

-- name: get_api_key
SELECT key_id, tenant_id, role, name, token_hash, created_at, revoked_at
  FROM api_keys WHERE key_id = :key_id

-- name: list_api_keys
SELECT key_id, tenant_id, role, name, token_hash, created_at, revoked_at
  FROM api_keys WHERE (:tenant_id IS NULL OR tenant_id = :tenant_id)
 ORDER BY created_at, key_id

-- name: revoke_api_key
UPDATE api_keys SET revoked_at = :at
 WHERE tenant_id = :tenant_id AND key_id = :key_id AND revoked_at IS NULL

-- name: put_intake_secret
INSERT INTO intake_secrets (tenant_id, source, secret, created_at) VALUES (:tenant_id, :source, :secret, :created_at)
ON CONFLICT (tenant_id, source) DO UPDATE
   SET secret = excluded.secret, created_at = excluded.created_at

-- name: get_intake_secret
SELECT tenant_id, source, secret, created_at FROM intake_secrets
 WHERE tenant_id = :tenant_id AND source = :source

-- name: list_intake_secrets
SELECT tenant_id, source, secret, created_at FROM intake_secrets
 WHERE tenant_id = :tenant_id ORDER BY source

-- name: delete_intake_secret
DELETE FROM intake_secrets WHERE tenant_id = :tenant_id AND source = :source

-- name: log_access
INSERT INTO access_log (tenant_id, at, key_id, key_name, run_id, endpoint, purpose, revealed,
                        prev_hash, hash)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)

-- name: access_head
SELECT tenant_id, seq, hash, entries FROM access_log_heads WHERE tenant_id = :tenant_id

-- name: put_access_head
INSERT INTO access_log_heads (tenant_id, seq, hash, entries) VALUES (?, ?, ?, ?)
ON CONFLICT (tenant_id) DO UPDATE
   SET seq = excluded.seq, hash = excluded.hash, entries = excluded.entries

-- name: access_chain
SELECT tenant_id, at, key_id, key_name, run_id, endpoint, seq, purpose, revealed, prev_hash,
       hash
  FROM access_log WHERE tenant_id = :tenant_id AND seq > :after ORDER BY seq LIMIT :limit

-- name: list_access
SELECT tenant_id, at, key_id, key_name, run_id, endpoint, seq, purpose, revealed, prev_hash,
       hash
  FROM access_log
 WHERE tenant_id = :tenant_id
   AND (:run_id IS NULL OR run_id = :run_id)
   AND (:key_id IS NULL OR key_id = :key_id)
   AND (:who IS NULL OR key_name = :who)
   AND (:purpose IS NULL OR purpose = :purpose)
   AND (:since IS NULL OR at >= :since)
   AND (:until IS NULL OR at < :until)
   AND (:before IS NULL OR seq < :before)
 ORDER BY seq DESC
 LIMIT :limit

-- name: record_consent
INSERT INTO consents (tenant_id, subject, purpose, state, reference, recorded_by, at)
VALUES (?, ?, ?, ?, ?, ?, ?)

-- name: current_consents
SELECT tenant_id, subject, purpose, state, reference, recorded_by, at, seq FROM consents c
 WHERE tenant_id = :tenant_id AND subject = :subject
   AND (:purposes IS NULL OR purpose IN (SELECT value FROM json_each(:purposes)))
   AND seq = (SELECT MAX(seq) FROM consents m
               WHERE m.tenant_id = c.tenant_id AND m.subject = c.subject
                 AND m.purpose = c.purpose)
 ORDER BY purpose

-- name: consent_history
SELECT tenant_id, subject, purpose, state, reference, recorded_by, at, seq FROM consents
 WHERE tenant_id = :tenant_id AND subject = :subject
   AND (:purpose IS NULL OR purpose = :purpose)
 ORDER BY seq

-- Retention and legal holds (migration 0013).

-- name: put_hold
-- A standing hold is left as it is (no row changes); a released one is replaced.
INSERT INTO legal_holds (tenant_id, kind, target, reason, held_by, created_at, released_at,
                         released_by)
VALUES (:tenant_id, :kind, :target, :reason, :by, :created_at, NULL, NULL)
ON CONFLICT (tenant_id, kind, target) DO UPDATE
   SET reason = excluded.reason, held_by = excluded.held_by,
       created_at = excluded.created_at, released_at = NULL, released_by = NULL
 WHERE legal_holds.released_at IS NOT NULL

-- name: release_hold
UPDATE legal_holds SET released_at = :at, released_by = :by
 WHERE tenant_id = :tenant_id AND kind = :kind AND target = :target AND released_at IS NULL

-- name: list_holds
SELECT tenant_id, kind, target, reason, held_by, created_at, released_at, released_by
  FROM legal_holds
 WHERE (:tenant_id IS NULL OR tenant_id = :tenant_id)
   AND (:released OR released_at IS NULL)
 ORDER BY tenant_id, kind, target

-- name: retention_candidates
SELECT * FROM runs AS r
 WHERE r.tenant_id = :tenant_id AND r.status = :status AND r.updated_at < :ended_before
   AND (:flow IS NULL OR r.flow = :flow)
   AND (:after_at IS NULL OR r.updated_at > :after_at
        OR (r.updated_at = :after_at AND r.run_id > :after_id))
   AND NOT EXISTS (SELECT 1 FROM purged_runs AS p
                    WHERE p.tenant_id = r.tenant_id AND p.run_id = r.run_id)
 ORDER BY r.updated_at, r.run_id
 LIMIT :limit

-- name: purge_head
-- What a purge checks, in one read under the write lock: the row, whether a legal hold
-- stands on the run or its subject, whether it was purged already, the journal's extent.
SELECT r.status, r.last_seq,
       EXISTS (SELECT 1 FROM legal_holds AS h
                WHERE h.tenant_id = r.tenant_id AND h.released_at IS NULL
                  AND ((h.kind = 'run' AND h.target = r.run_id)
                       OR (h.kind = 'subject' AND h.target = r.subject))) AS held,
       EXISTS (SELECT 1 FROM purged_runs AS p
                WHERE p.tenant_id = r.tenant_id AND p.run_id = r.run_id) AS purged,
       (SELECT COUNT(*) FROM events AS e
         WHERE e.tenant_id = r.tenant_id AND e.run_id = r.run_id) AS events,
       (SELECT COALESCE(MAX(seq), 0) FROM events AS e
         WHERE e.tenant_id = r.tenant_id AND e.run_id = r.run_id) AS head
  FROM runs AS r WHERE r.tenant_id = ? AND r.run_id = ?

-- name: tombstone_event
UPDATE events SET payload = ?
 WHERE tenant_id = ? AND run_id = ? AND seq = ? AND type = ? AND hash = unhex(?)

-- name: delete_signals_of_run
DELETE FROM signals WHERE tenant_id = ? AND run_id = ?

-- name: clear_run_fields
-- The error may quote the payloads; the subject ties the run to a person.
UPDATE runs SET error = NULL, subject = NULL WHERE tenant_id = ? AND run_id = ?

-- name: insert_purged_run
INSERT INTO purged_runs (tenant_id, run_id, sweep_id, purged_at, events, rule)
VALUES (?, ?, ?, ?, ?, ?)

-- name: purged_runs
SELECT tenant_id, run_id, sweep_id, purged_at, events, rule FROM purged_runs
 WHERE tenant_id = :tenant_id AND (:sweep_id IS NULL OR sweep_id = :sweep_id)
   AND (:run_id IS NULL OR run_id = :run_id)
 ORDER BY purged_at DESC, run_id
 LIMIT :limit

-- name: blob_keys
SELECT key FROM blobs WHERE tenant_id = :tenant_id AND (:after IS NULL OR key > :after)
 ORDER BY key LIMIT :limit

-- name: delete_blobs
DELETE FROM blobs
 WHERE tenant_id = :tenant_id AND key IN (SELECT value FROM json_each(:keys))
   AND written_at < (julianday('now') - 2440587.5) * 86400.0 - :idle

-- name: delete_loose_chunks
-- Chunks no blob row refers to (their blob was deleted, or a crash came before its row
-- was written), not written lately.
DELETE FROM blob_chunks
 WHERE tenant_id = :tenant_id
   AND written_at < (julianday('now') - 2440587.5) * 86400.0 - :idle
   AND NOT EXISTS (SELECT 1 FROM blobs AS b
                    WHERE b.tenant_id = blob_chunks.tenant_id AND b.key = blob_chunks.key)

-- name: record_sweep
INSERT INTO retention_sweeps (sweep_id, tenant_id, started_at, swept_by, finished_at, purged,
                              held, skipped, blobs_deleted, collected_at, forgotten)
VALUES (:sweep_id, :tenant_id, :started_at, :by, :finished_at, :purged, :held, :skipped, :blobs_deleted, :collected_at, :forgotten)
ON CONFLICT (sweep_id, tenant_id) DO UPDATE
   SET started_at = excluded.started_at, swept_by = excluded.swept_by,
       finished_at = excluded.finished_at, purged = excluded.purged, held = excluded.held,
       skipped = excluded.skipped, blobs_deleted = excluded.blobs_deleted,
       collected_at = excluded.collected_at, forgotten = excluded.forgotten

-- name: list_sweeps
SELECT sweep_id, tenant_id, started_at, swept_by, finished_at, purged, held, skipped,
       blobs_deleted, collected_at, forgotten
  FROM retention_sweeps
 WHERE (:tenant_id IS NULL OR tenant_id = :tenant_id)
 ORDER BY started_at DESC, sweep_id, tenant_id
 LIMIT :limit

-- Encryption at rest: tenants' data keys, kept wrapped (migration 0014), and the sealed
-- rows a key rotation seals again.

-- name: insert_data_key
INSERT INTO data_keys (tenant_id, key_id, scope, wrapped, kek_id, created_at, state)
VALUES (?, ?, ?, ?, ?, ?, 'active')

-- name: get_data_key
SELECT tenant_id, key_id, wrapped, kek_id, created_at, state, scope FROM data_keys
 WHERE tenant_id = :tenant_id AND key_id = :key_id

-- name: active_data_key
SELECT tenant_id, key_id, wrapped, kek_id, created_at, state, scope FROM data_keys
 WHERE tenant_id = :tenant_id AND scope = :scope AND state = 'active'

-- name: retire_data_key
UPDATE data_keys SET state = 'retired' WHERE tenant_id = ? AND key_id = ? AND state = 'active'

-- name: list_data_keys
SELECT tenant_id, key_id, wrapped, kek_id, created_at, state, scope FROM data_keys
 WHERE (:tenant_id IS NULL OR tenant_id = :tenant_id)
 ORDER BY created_at, tenant_id, key_id

-- name: rewrap_data_key
UPDATE data_keys SET wrapped = :wrapped, kek_id = :kek_id
 WHERE tenant_id = :tenant_id AND key_id = :key_id AND kek_id = :expected_kek_id AND state <> 'destroyed'

-- name: destroy_data_key
UPDATE data_keys SET wrapped = X'', state = 'destroyed'
 WHERE tenant_id = :tenant_id AND key_id = :key_id AND state <> 'destroyed'

-- name: destroy_scope_keys
UPDATE data_keys SET wrapped = X'', state = 'destroyed'
 WHERE tenant_id = ? AND scope = ? AND state <> 'destroyed'

-- name: insert_erasure
INSERT INTO erasures (tenant_id, subject, erased_at, erased_by, reason, runs, knowledge, keys,
                      vault)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
RETURNING seq

-- name: list_erasures
SELECT tenant_id, subject, erased_at, erased_by, reason, runs, knowledge, keys, vault, seq
  FROM erasures
 WHERE (:tenant_id IS NULL OR tenant_id = :tenant_id)
   AND (:subject IS NULL OR subject = :subject)
 ORDER BY seq

-- name: sealed_blob_rows
SELECT key, data FROM blobs WHERE tenant_id = :tenant_id AND key > :first ORDER BY key LIMIT :limit

-- name: sealed_signal_rows
SELECT run_id, signal_id, name, payload FROM signals
 WHERE tenant_id = :tenant_id AND consumed = 0 AND (run_id, signal_id) > (:first, :second)
 ORDER BY run_id, signal_id LIMIT :limit

-- name: sealed_schedule_rows
SELECT name, input FROM schedules WHERE tenant_id = :tenant_id AND name > :first ORDER BY name LIMIT :limit

-- name: reseal_blob
UPDATE blobs SET data = :new WHERE tenant_id = :tenant_id AND key = :first AND data = :old

-- name: reseal_signal
UPDATE signals SET payload = :new
 WHERE tenant_id = :tenant_id AND run_id = :first AND signal_id = :second AND consumed = 0 AND payload = :old

-- name: reseal_schedule
UPDATE schedules SET input = :new WHERE tenant_id = :tenant_id AND name = :first AND input = :old

-- name: budget_used
SELECT used FROM budget_usage WHERE tenant_id = :tenant_id AND since = :since

-- name: budget_seed
INSERT INTO budget_usage (tenant_id, since, used) VALUES (?, ?, ?)

-- name: budget_put_used
UPDATE budget_usage SET used = ? WHERE tenant_id = ? AND since = ?

-- name: budget_hold
SELECT since, amounts FROM budget_holds WHERE tenant_id = ? AND hold_key = ?

-- name: budget_put_hold
INSERT INTO budget_holds (tenant_id, hold_key, since, amounts) VALUES (?, ?, ?, ?)
ON CONFLICT (tenant_id, hold_key) DO UPDATE SET since = excluded.since,
                                                amounts = excluded.amounts

-- name: budget_forget_holds
DELETE FROM budget_holds WHERE tenant_id = ? AND since < ?

-- name: budget_forget_used
DELETE FROM budget_usage WHERE tenant_id = ? AND since < ?

-- name: span_cursor
SELECT exported_seq FROM span_exports WHERE tenant_id = :tenant_id AND run_id = :run_id

-- name: advance_span_cursor
INSERT INTO span_exports (tenant_id, run_id, exported_seq) VALUES (:tenant_id, :run_id, :seq)
ON CONFLICT (tenant_id, run_id) DO UPDATE
   SET exported_seq = MAX(span_exports.exported_seq, excluded.exported_seq)

-- name: unexported_runs
SELECT r.tenant_id, r.run_id FROM runs r
  LEFT JOIN span_exports x ON x.tenant_id = r.tenant_id AND x.run_id = r.run_id
 WHERE r.updated_at >= :since AND r.last_seq > COALESCE(x.exported_seq, 0)
 ORDER BY r.updated_at LIMIT :limit

-- name: stream_append
-- The rows are a JSON array of [key, step, index, attempt, delta, written_at], written in
-- order; nothing is written unless the worker still holds the run.
INSERT INTO stream_deltas (tenant_id, run_id, call_key, step, call_index, attempt, delta,
                           written_at)
SELECT :tenant_id, :run_id, json_extract(j.value, '$[0]'), json_extract(j.value, '$[1]'),
       json_extract(j.value, '$[2]'), json_extract(j.value, '$[3]'),
       json_extract(j.value, '$[4]'), json_extract(j.value, '$[5]')
  FROM json_each(:rows) AS j
 WHERE EXISTS (SELECT 1 FROM runs WHERE tenant_id = :tenant_id AND run_id = :run_id
                                    AND lease_token = :fence)
 ORDER BY j.key
RETURNING stream_offset

-- name: stream_attempt
SELECT COALESCE(MAX(attempt), 0) FROM stream_deltas
 WHERE tenant_id = :tenant_id AND run_id = :run_id AND call_key = :key

-- name: stream_read
SELECT stream_offset, call_key, step, call_index, attempt, delta, written_at
  FROM stream_deltas
 WHERE tenant_id = :tenant_id AND run_id = :run_id AND stream_offset > :after
 ORDER BY stream_offset LIMIT :limit

-- name: stream_drop
DELETE FROM stream_deltas
 WHERE tenant_id = :tenant_id AND run_id = :run_id AND (:keep IS NULL OR call_key <> :keep)

-- name: stream_prune
DELETE FROM stream_deltas
 WHERE written_at < :before
   AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.tenant_id = stream_deltas.tenant_id
                                          AND r.run_id = stream_deltas.run_id
                                          AND r.lease_owner IS NOT NULL)

-- Forgetting purged runs (migration 0028): the candidates, what a forget checks, the rows
-- it deletes and the forget log it appends to.

-- name: forget_candidates
SELECT r.*
  FROM runs AS r JOIN purged_runs AS p ON p.tenant_id = r.tenant_id AND p.run_id = r.run_id
 WHERE r.tenant_id = :tenant_id AND r.updated_at < :ended_before
   AND (:flow IS NULL OR r.flow = :flow)
   AND (:after_at IS NULL OR r.updated_at > :after_at
        OR (r.updated_at = :after_at AND r.run_id > :after_id))
 ORDER BY r.updated_at, r.run_id
 LIMIT :limit

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
  FROM runs AS r WHERE r.tenant_id = :tenant_id AND r.run_id = :run_id

-- name: forget_log_tail
SELECT seq, hash FROM forgotten_runs WHERE tenant_id = :tenant_id
 ORDER BY seq DESC LIMIT 1

-- name: forget_events
DELETE FROM events WHERE tenant_id = :tenant_id AND run_id = :run_id

-- name: forget_checkpoints
DELETE FROM checkpoints WHERE tenant_id = :tenant_id AND run_id = :run_id

-- name: forget_checkpoint_history
DELETE FROM checkpoint_history WHERE tenant_id = :tenant_id AND run_id = :run_id

-- name: forget_signals
DELETE FROM signals WHERE tenant_id = :tenant_id AND run_id = :run_id

-- name: forget_run_labels
DELETE FROM run_labels WHERE tenant_id = :tenant_id AND run_id = :run_id

-- name: forget_span_exports
DELETE FROM span_exports WHERE tenant_id = :tenant_id AND run_id = :run_id

-- name: forget_stream_deltas
DELETE FROM stream_deltas WHERE tenant_id = :tenant_id AND run_id = :run_id

-- name: forget_purged_runs
DELETE FROM purged_runs WHERE tenant_id = :tenant_id AND run_id = :run_id

-- name: forget_runs
DELETE FROM runs WHERE tenant_id = :tenant_id AND run_id = :run_id

-- name: insert_forgotten_run
INSERT INTO forgotten_runs (tenant_id, seq, run_id, last_seq, head, sweep_id, forgotten_at,
                            hash)
VALUES (:tenant_id, :seq, :run_id, :last_seq, :head, :sweep_id,
        :at, :hash)

-- name: forgotten_runs
SELECT tenant_id, seq, run_id, last_seq, head, sweep_id, forgotten_at, hash
  FROM forgotten_runs
 WHERE tenant_id = :tenant_id AND seq > :after
   AND (:sweep_id IS NULL OR sweep_id = :sweep_id)
 ORDER BY seq LIMIT :limit

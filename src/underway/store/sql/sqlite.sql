-- Named queries for SQLite. Every query takes the tenant.

-- name: schema_version_table
CREATE TABLE IF NOT EXISTS underway_schema_version (
    version    INTEGER PRIMARY KEY,
    name       TEXT NOT NULL,
    applied_at REAL NOT NULL
)

-- name: schema_version
SELECT COALESCE(MAX(version), 0) FROM underway_schema_version

-- name: record_migration
INSERT INTO underway_schema_version (version, name, applied_at) VALUES (?, ?, ?)

-- name: insert_run
INSERT INTO runs (tenant_id, run_id, flow, status, step, idempotency_key, last_seq, last_hash,
                  next_wake_at, created_at, updated_at, queue)
VALUES (?, ?, ?, 'ready', ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT DO NOTHING

-- name: find_by_idempotency
SELECT * FROM runs WHERE tenant_id = ? AND flow = ? AND idempotency_key = ?

-- name: get_run
SELECT * FROM runs WHERE tenant_id = ? AND run_id = ?

-- name: list_runs
SELECT * FROM runs WHERE tenant_id = ? ORDER BY created_at DESC, run_id LIMIT ?

-- name: list_runs_by_status
SELECT * FROM runs WHERE tenant_id = ? AND status = ? ORDER BY created_at DESC, run_id LIMIT ?

-- name: tenants
SELECT DISTINCT tenant_id FROM runs ORDER BY tenant_id

-- name: journaled_runs
SELECT tenant_id, run_id FROM runs
UNION
SELECT DISTINCT tenant_id, run_id FROM events
ORDER BY 1, 2

-- name: journaled_runs_of_tenant
SELECT tenant_id, run_id FROM runs WHERE tenant_id = ?
UNION
SELECT DISTINCT tenant_id, run_id FROM events WHERE tenant_id = ?
ORDER BY 1, 2

-- name: insert_event
INSERT INTO events (tenant_id, run_id, seq, type, payload, hash) VALUES (?, ?, ?, ?, ?, ?)

-- name: insert_blob
INSERT INTO blobs (tenant_id, key, data) VALUES (?, ?, ?) ON CONFLICT DO NOTHING

-- name: get_blob
SELECT key, data FROM blobs WHERE tenant_id = ? AND key = ?

-- name: advance_run
UPDATE runs
   SET last_seq = ?, last_hash = ?, status = ?, step = ?, next_wake_at = ?, waiting_signal = ?,
       error = ?, updated_at = ?
 WHERE tenant_id = ? AND run_id = ?

-- name: last_seq
SELECT COALESCE(MAX(seq), 0) FROM events WHERE tenant_id = ? AND run_id = ?

-- name: release_after_append
UPDATE runs SET lease_owner = NULL, lease_expires_at = NULL WHERE tenant_id = ? AND run_id = ?

-- name: upsert_checkpoint
INSERT INTO checkpoints (tenant_id, run_id, seq, state) VALUES (?, ?, ?, ?)
ON CONFLICT (tenant_id, run_id) DO UPDATE SET seq = excluded.seq, state = excluded.state

-- name: load_checkpoint
SELECT seq, state FROM checkpoints WHERE tenant_id = ? AND run_id = ?

-- name: delete_checkpoints_of_run
DELETE FROM checkpoints WHERE tenant_id = ? AND run_id = ?

-- name: delete_checkpoints_of_tenant
DELETE FROM checkpoints WHERE tenant_id = ?

-- name: load_events
SELECT seq, type, payload, hash FROM events
 WHERE tenant_id = ? AND run_id = ? AND seq > ? ORDER BY seq

-- name: due_runs
SELECT tenant_id, run_id FROM runs
 WHERE next_wake_at IS NOT NULL AND next_wake_at <= ?
   AND status NOT IN ('completed', 'failed', 'cancelled')
   AND (lease_owner IS NULL OR lease_expires_at < ?)
 ORDER BY next_wake_at LIMIT ?

-- name: due_runs_of_tenant
SELECT tenant_id, run_id FROM runs
 WHERE tenant_id = ? AND next_wake_at IS NOT NULL AND next_wake_at <= ?
   AND status NOT IN ('completed', 'failed', 'cancelled')
   AND (lease_owner IS NULL OR lease_expires_at < ?)
 ORDER BY next_wake_at LIMIT ?

-- name: due_run
SELECT tenant_id, run_id FROM runs
 WHERE tenant_id = ? AND run_id = ? AND next_wake_at IS NOT NULL AND next_wake_at <= ?
   AND status NOT IN ('completed', 'failed', 'cancelled')
   AND (lease_owner IS NULL OR lease_expires_at < ?)
 LIMIT ?

-- name: take_lease
UPDATE runs SET lease_owner = ?, lease_token = lease_token + 1, lease_expires_at = ?
 WHERE tenant_id = ? AND run_id = ?
RETURNING lease_token

-- name: renew_lease
UPDATE runs SET lease_expires_at = ?
 WHERE tenant_id = ? AND run_id = ? AND lease_owner = ? AND lease_token = ?

-- name: release_lease
UPDATE runs SET lease_owner = NULL, lease_expires_at = NULL
 WHERE tenant_id = ? AND run_id = ? AND lease_owner = ? AND lease_token = ?

-- name: insert_signal
INSERT INTO signals (tenant_id, run_id, signal_id, name, payload, sender, created_at)
VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING

-- name: wake_for_signal
UPDATE runs SET next_wake_at = ?, control_pending = control_pending OR (? LIKE 'underway.%')
 WHERE tenant_id = ? AND run_id = ? AND status NOT IN ('completed', 'failed', 'cancelled')
   AND (waiting_signal = ? OR ? LIKE 'underway.%')

-- name: pending_signals
SELECT tenant_id, run_id, signal_id, name, payload, sender, created_at FROM signals
 WHERE tenant_id = ? AND run_id = ? AND consumed = 0 ORDER BY created_at, signal_id

-- name: consume_signal
UPDATE signals SET consumed = 1 WHERE tenant_id = ? AND run_id = ? AND signal_id = ?

-- name: wake_if_signal_pending
UPDATE runs SET next_wake_at = ?
 WHERE tenant_id = ? AND run_id = ? AND status NOT IN ('completed', 'failed', 'cancelled')
   AND (control_pending = 1
        OR (waiting_signal IS NOT NULL
            AND EXISTS (SELECT 1 FROM signals s
                         WHERE s.tenant_id = runs.tenant_id AND s.run_id = runs.run_id
                           AND s.name = runs.waiting_signal AND s.consumed = 0)))

-- name: refresh_control_pending
UPDATE runs SET control_pending = EXISTS (
        SELECT 1 FROM signals s
         WHERE s.tenant_id = runs.tenant_id AND s.run_id = runs.run_id
           AND s.consumed = 0 AND s.name LIKE 'underway.%')
 WHERE tenant_id = ? AND run_id = ?

-- name: held_leases
SELECT tenant_id, run_id, lease_owner FROM runs
 WHERE lease_owner IS NOT NULL AND lease_expires_at >= ?

-- name: expire_lease
UPDATE runs SET lease_expires_at = 0 WHERE tenant_id = ? AND run_id = ? AND lease_owner = ?

-- name: next_wake_at
SELECT MIN(next_wake_at) FROM runs
 WHERE next_wake_at IS NOT NULL AND status NOT IN ('completed', 'failed', 'cancelled')

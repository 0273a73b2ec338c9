-- The durable core: runs, events, checkpoints, blobs, signals.
CREATE TABLE runs (
    tenant_id        TEXT    NOT NULL,
    run_id           TEXT    NOT NULL,
    flow             TEXT    NOT NULL,
    status           TEXT    NOT NULL,
    step             TEXT,
    idempotency_key  TEXT,
    last_seq         INTEGER NOT NULL,
    last_hash        TEXT    NOT NULL,
    next_wake_at     REAL,
    waiting_signal   TEXT,
    control_pending  INTEGER NOT NULL DEFAULT 0,
    lease_owner      TEXT,
    lease_token      INTEGER NOT NULL DEFAULT 0,
    lease_expires_at REAL,
    created_at       REAL    NOT NULL,
    updated_at       REAL    NOT NULL,
    error            TEXT,
    PRIMARY KEY (tenant_id, run_id)
);
CREATE UNIQUE INDEX runs_idempotency ON runs (tenant_id, flow, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
CREATE INDEX runs_due ON runs (next_wake_at) WHERE next_wake_at IS NOT NULL;
CREATE INDEX runs_status ON runs (tenant_id, status, created_at);

CREATE TABLE events (
    tenant_id TEXT    NOT NULL,
    run_id    TEXT    NOT NULL,
    seq       INTEGER NOT NULL,
    type      TEXT    NOT NULL,
    payload   BLOB    NOT NULL,
    hash      TEXT    NOT NULL,
    PRIMARY KEY (tenant_id, run_id, seq)
) WITHOUT ROWID;

CREATE TABLE checkpoints (
    tenant_id TEXT    NOT NULL,
    run_id    TEXT    NOT NULL,
    seq       INTEGER NOT NULL,
    state     BLOB    NOT NULL,
    PRIMARY KEY (tenant_id, run_id)
) WITHOUT ROWID;

CREATE TABLE blobs (
    tenant_id TEXT NOT NULL,
    key       TEXT NOT NULL,
    data      BLOB NOT NULL,
    PRIMARY KEY (tenant_id, key)
) WITHOUT ROWID;

CREATE TABLE signals (
    tenant_id     TEXT NOT NULL,
    run_id        TEXT NOT NULL,
    signal_id     TEXT NOT NULL,
    name          TEXT NOT NULL,
    payload       BLOB NOT NULL,
    sender        TEXT,
    created_at    REAL NOT NULL,
    consumed      INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant_id, run_id, signal_id)
) WITHOUT ROWID;

-- Retention and legal holds: when each blob was last written (the collector spares a
-- blob written while it decides), legal holds on runs and on data subjects (released
-- ones stay on record), the record of every run's purge and the log of retention sweeps.
ALTER TABLE blobs ADD COLUMN written_at REAL NOT NULL DEFAULT 0;

CREATE TABLE legal_holds (
    tenant_id   TEXT NOT NULL,
    kind        TEXT NOT NULL,
    target      TEXT NOT NULL,
    reason      TEXT NOT NULL,
    held_by     TEXT NOT NULL,
    created_at  REAL NOT NULL,
    released_at REAL,
    released_by TEXT,
    PRIMARY KEY (tenant_id, kind, target)
) WITHOUT ROWID;

CREATE TABLE purged_runs (
    tenant_id TEXT    NOT NULL,
    run_id    TEXT    NOT NULL,
    sweep_id  TEXT    NOT NULL,
    purged_at REAL    NOT NULL,
    events    INTEGER NOT NULL,
    rule      TEXT    NOT NULL,
    PRIMARY KEY (tenant_id, run_id)
) WITHOUT ROWID;

CREATE INDEX purged_runs_time ON purged_runs (tenant_id, purged_at);

CREATE TABLE retention_sweeps (
    sweep_id      TEXT    NOT NULL,
    tenant_id     TEXT    NOT NULL,
    started_at    REAL    NOT NULL,
    swept_by      TEXT    NOT NULL,
    finished_at   REAL,
    purged        INTEGER NOT NULL,
    held          INTEGER NOT NULL,
    skipped       INTEGER NOT NULL,
    blobs_deleted INTEGER,
    collected_at  REAL,
    PRIMARY KEY (sweep_id, tenant_id)
) WITHOUT ROWID;

CREATE INDEX retention_sweeps_tenant ON retention_sweeps (tenant_id, started_at);

-- Retention and legal holds: when each blob was last written (the collector spares a
-- blob written while it decides), legal holds on runs and on data subjects (released
-- ones stay on record), the record of every run's purge and the log of retention sweeps.
ALTER TABLE blobs ADD COLUMN written_at double precision NOT NULL DEFAULT 0;

CREATE TABLE legal_holds (
    tenant_id   text             NOT NULL,
    kind        text             NOT NULL,
    target      text             NOT NULL,
    reason      text             NOT NULL,
    held_by     text             NOT NULL,
    created_at  double precision NOT NULL,
    released_at double precision,
    released_by text,
    PRIMARY KEY (tenant_id, kind, target)
);

CREATE TABLE purged_runs (
    tenant_id text             NOT NULL,
    run_id    text             NOT NULL,
    sweep_id  text             NOT NULL,
    purged_at double precision NOT NULL,
    events    bigint           NOT NULL,
    rule      text             NOT NULL,
    PRIMARY KEY (tenant_id, run_id)
);

CREATE INDEX purged_runs_time ON purged_runs (tenant_id, purged_at);

CREATE TABLE retention_sweeps (
    sweep_id      text             NOT NULL,
    tenant_id     text             NOT NULL,
    started_at    double precision NOT NULL,
    swept_by      text             NOT NULL,
    finished_at   double precision,
    purged        bigint           NOT NULL,
    held          bigint           NOT NULL,
    skipped       bigint           NOT NULL,
    blobs_deleted bigint,
    collected_at  double precision,
    PRIMARY KEY (sweep_id, tenant_id)
);

CREATE INDEX retention_sweeps_tenant ON retention_sweeps (tenant_id, started_at);

-- Schedules (cron-style periodic runs) and intake (outside events acted on once per key).
CREATE TABLE schedules (
    tenant_id     TEXT    NOT NULL,
    name          TEXT    NOT NULL,
    flow          TEXT    NOT NULL,
    cron          TEXT    NOT NULL,
    timezone      TEXT    NOT NULL,
    input         BLOB    NOT NULL,
    queue         TEXT    NOT NULL,
    next_fire_at  REAL    NOT NULL,
    enabled       INTEGER NOT NULL DEFAULT 1,
    created_at    REAL    NOT NULL,
    last_fired_at REAL,
    claimed_until REAL,
    PRIMARY KEY (tenant_id, name)
) WITHOUT ROWID;
CREATE INDEX schedules_due ON schedules (next_fire_at) WHERE enabled = 1;

CREATE TABLE intake (
    tenant_id       TEXT NOT NULL,
    idempotency_key TEXT NOT NULL,
    entity_id       TEXT NOT NULL,
    event_type      TEXT NOT NULL,
    action          TEXT NOT NULL,
    run_id          TEXT NOT NULL,
    created_at      REAL NOT NULL,
    PRIMARY KEY (tenant_id, idempotency_key)
) WITHOUT ROWID;

CREATE TABLE intake_owners (
    tenant_id TEXT NOT NULL,
    entity_id TEXT NOT NULL,
    run_id    TEXT NOT NULL,
    since     REAL NOT NULL,
    PRIMARY KEY (tenant_id, entity_id)
) WITHOUT ROWID;

-- Schedules (cron-style periodic runs) and intake (outside events acted on once per key).
CREATE TABLE schedules (
    tenant_id     text             NOT NULL,
    name          text             NOT NULL,
    flow          text             NOT NULL,
    cron          text             NOT NULL,
    timezone      text             NOT NULL,
    input         bytea            NOT NULL,
    queue         text             NOT NULL,
    next_fire_at  double precision NOT NULL,
    enabled       boolean          NOT NULL DEFAULT true,
    created_at    double precision NOT NULL,
    last_fired_at double precision,
    claimed_until double precision,
    PRIMARY KEY (tenant_id, name)
);
CREATE INDEX schedules_due ON schedules (next_fire_at) WHERE enabled;

CREATE TABLE intake (
    tenant_id       text             NOT NULL,
    idempotency_key text             NOT NULL,
    entity_id       text             NOT NULL,
    event_type      text             NOT NULL,
    action          text             NOT NULL,
    run_id          text             NOT NULL,
    created_at      double precision NOT NULL,
    PRIMARY KEY (tenant_id, idempotency_key)
);

CREATE TABLE intake_owners (
    tenant_id text             NOT NULL,
    entity_id text             NOT NULL,
    run_id    text             NOT NULL,
    since     double precision NOT NULL,
    PRIMARY KEY (tenant_id, entity_id)
);

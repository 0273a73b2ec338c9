-- The durable core: runs, events, checkpoints, blobs, signals.
-- Times are epoch seconds; stored event, checkpoint and blob bytes are opaque.
CREATE TABLE runs (
    tenant_id        text             NOT NULL,
    run_id           text             NOT NULL,
    flow             text             NOT NULL,
    status           text             NOT NULL,
    step             text,
    idempotency_key  text,
    last_seq         bigint           NOT NULL,
    last_hash        text             NOT NULL,
    next_wake_at     double precision,
    waiting_signal   text,
    control_pending  boolean          NOT NULL DEFAULT false,
    lease_owner      text,
    lease_token      bigint           NOT NULL DEFAULT 0,
    lease_expires_at double precision,
    created_at       double precision NOT NULL,
    updated_at       double precision NOT NULL,
    error            text,
    PRIMARY KEY (tenant_id, run_id)
);
CREATE UNIQUE INDEX runs_idempotency ON runs (tenant_id, flow, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
CREATE INDEX runs_due ON runs (next_wake_at) WHERE next_wake_at IS NOT NULL;
CREATE INDEX runs_status ON runs (tenant_id, status, created_at);

CREATE TABLE events (
    tenant_id text   NOT NULL,
    run_id    text   NOT NULL,
    seq       bigint NOT NULL,
    type      text   NOT NULL,
    payload   bytea  NOT NULL,
    hash      text   NOT NULL,
    PRIMARY KEY (tenant_id, run_id, seq)
);

CREATE TABLE checkpoints (
    tenant_id text   NOT NULL,
    run_id    text   NOT NULL,
    seq       bigint NOT NULL,
    state     bytea  NOT NULL,
    PRIMARY KEY (tenant_id, run_id)
);

CREATE TABLE blobs (
    tenant_id text  NOT NULL,
    key       text  NOT NULL,
    data      bytea NOT NULL,
    PRIMARY KEY (tenant_id, key)
);

CREATE TABLE signals (
    tenant_id  text             NOT NULL,
    run_id     text             NOT NULL,
    signal_id  text             NOT NULL,
    name       text             NOT NULL,
    payload    bytea            NOT NULL,
    sender     text,
    created_at double precision NOT NULL,
    consumed   boolean          NOT NULL DEFAULT false,
    PRIMARY KEY (tenant_id, run_id, signal_id)
);

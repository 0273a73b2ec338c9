-- Circuit breakers shared by every worker: one row per (tenant or '*', tool).
CREATE TABLE circuits (
    tenant_id   text             NOT NULL,
    name        text             NOT NULL,
    failures    integer          NOT NULL DEFAULT 0,
    open_until  double precision,
    trial_until double precision,
    updated_at  double precision NOT NULL,
    PRIMARY KEY (tenant_id, name)
);

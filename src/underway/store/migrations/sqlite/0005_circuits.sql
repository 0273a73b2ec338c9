-- Circuit breakers shared by every worker: one row per (tenant or '*', tool).
CREATE TABLE circuits (
    tenant_id   TEXT    NOT NULL,
    name        TEXT    NOT NULL,
    failures    INTEGER NOT NULL DEFAULT 0,
    open_until  REAL,
    trial_until REAL,
    updated_at  REAL    NOT NULL,
    PRIMARY KEY (tenant_id, name)
) WITHOUT ROWID;

-- The budget ledger: what each tenant reserved against its budget per UTC day (`used`,
-- JSON by metric) and each call's hold (its idempotency key, its amounts). A reservation
-- updates both in one transaction holding the day's row.
CREATE TABLE budget_usage (
    tenant_id TEXT NOT NULL,
    since     DOUBLE PRECISION NOT NULL,
    used      TEXT NOT NULL,
    PRIMARY KEY (tenant_id, since)
);

CREATE TABLE budget_holds (
    tenant_id TEXT NOT NULL,
    hold_key  TEXT NOT NULL,
    since     DOUBLE PRECISION NOT NULL,
    amounts   TEXT NOT NULL,
    PRIMARY KEY (tenant_id, hold_key)
);

CREATE INDEX budget_holds_since ON budget_holds (tenant_id, since);

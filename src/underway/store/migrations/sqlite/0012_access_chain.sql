-- The access log gains why (purpose), whether sensitive fields were shown (revealed), and a
-- hash chain per tenant: each entry's hash covers its fields and the hash before it, and
-- access_log_heads holds the last entry of each tenant's chain, so a deleted, altered or
-- inserted entry (and a cut tail) shows. Entries written before this migration keep an
-- empty hash: they precede every chained entry of their tenant.
ALTER TABLE access_log ADD COLUMN purpose TEXT NOT NULL DEFAULT 'operations';
ALTER TABLE access_log ADD COLUMN revealed INTEGER NOT NULL DEFAULT 0;
ALTER TABLE access_log ADD COLUMN prev_hash TEXT NOT NULL DEFAULT '';
ALTER TABLE access_log ADD COLUMN hash TEXT NOT NULL DEFAULT '';

CREATE INDEX access_log_chain ON access_log (tenant_id, seq);

CREATE TABLE access_log_heads (
    tenant_id  TEXT    NOT NULL PRIMARY KEY,
    seq        INTEGER NOT NULL,
    hash       TEXT    NOT NULL,
    entries    INTEGER NOT NULL
) WITHOUT ROWID;

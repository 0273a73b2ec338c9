-- The access log gains why (purpose), whether sensitive fields were shown (revealed), and a
-- hash chain per tenant: each entry's hash covers its fields and the hash before it, and
-- access_log_heads holds the last entry of each tenant's chain (its row is locked while an
-- append extends the chain, so appends from many processes stay in one line), so a
-- deleted, altered or inserted entry (and a cut tail) shows. Entries written before this
-- migration keep an empty hash: they precede every chained entry of their tenant.
ALTER TABLE access_log ADD COLUMN purpose text NOT NULL DEFAULT 'operations';
ALTER TABLE access_log ADD COLUMN revealed boolean NOT NULL DEFAULT false;
ALTER TABLE access_log ADD COLUMN prev_hash text NOT NULL DEFAULT '';
ALTER TABLE access_log ADD COLUMN hash text NOT NULL DEFAULT '';

CREATE INDEX access_log_chain ON access_log (tenant_id, seq);

CREATE TABLE access_log_heads (
    tenant_id  text   NOT NULL PRIMARY KEY,
    seq        bigint NOT NULL,
    hash       text   NOT NULL,
    entries    bigint NOT NULL
);

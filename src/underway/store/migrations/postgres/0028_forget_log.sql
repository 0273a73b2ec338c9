-- Forgetting purged runs: once a second retention period is over, every row of a purged
-- run is deleted, and a line of its tenant's forget log names the run and the head its
-- journal ended at. The log is a hash chain per tenant (each line's hash covers its
-- fields and the line before it) and append-only: no statement may change or delete a
-- line (TRUNCATE included). Heads and hashes are kept as their 32 bytes.
CREATE TABLE forgotten_runs (
    tenant_id    text             NOT NULL,
    seq          bigint           NOT NULL,
    run_id       text             NOT NULL,
    last_seq     bigint           NOT NULL,
    head         bytea            NOT NULL,
    sweep_id     text             NOT NULL,
    forgotten_at double precision NOT NULL,
    hash         bytea            NOT NULL,
    PRIMARY KEY (tenant_id, seq)
);

CREATE FUNCTION forgotten_runs_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'the forget log is append-only';
END;
$$;

CREATE TRIGGER forgotten_runs_no_change BEFORE UPDATE OR DELETE ON forgotten_runs
    FOR EACH ROW EXECUTE FUNCTION forgotten_runs_append_only();

CREATE TRIGGER forgotten_runs_no_truncate BEFORE TRUNCATE ON forgotten_runs
    FOR EACH STATEMENT EXECUTE FUNCTION forgotten_runs_append_only();

ALTER TABLE retention_sweeps ADD COLUMN forgotten bigint NOT NULL DEFAULT 0;

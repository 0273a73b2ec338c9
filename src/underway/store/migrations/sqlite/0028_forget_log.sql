-- Forgetting purged runs: once a second retention period is over, every row of a purged
-- run is deleted, and a line of its tenant's forget log names the run and the head its
-- journal ended at. The log is a hash chain per tenant (each line's hash covers its
-- fields and the line before it) and append-only: no statement may change or delete a
-- line. Heads and hashes are kept as their 32 bytes.
CREATE TABLE forgotten_runs (
    tenant_id    TEXT    NOT NULL,
    seq          INTEGER NOT NULL,
    run_id       TEXT    NOT NULL,
    last_seq     INTEGER NOT NULL,
    head         BLOB    NOT NULL,
    sweep_id     TEXT    NOT NULL,
    forgotten_at REAL    NOT NULL,
    hash         BLOB    NOT NULL,
    PRIMARY KEY (tenant_id, seq)
) WITHOUT ROWID;

CREATE TRIGGER forgotten_runs_no_update BEFORE UPDATE ON forgotten_runs
BEGIN
    SELECT RAISE(ABORT, 'the forget log is append-only');
END;

CREATE TRIGGER forgotten_runs_no_delete BEFORE DELETE ON forgotten_runs
BEGIN
    SELECT RAISE(ABORT, 'the forget log is append-only');
END;

ALTER TABLE retention_sweeps ADD COLUMN forgotten INTEGER NOT NULL DEFAULT 0;

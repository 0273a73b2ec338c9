-- Data protection: the data subject and purpose of each run, on its row so that a
-- subject's runs are found on one index (to erase, hold or answer for them); and the
-- consent of each subject per purpose, as an append-only record of grants and withdrawals
-- that no statement may change or delete.
ALTER TABLE runs ADD COLUMN subject TEXT;
ALTER TABLE runs ADD COLUMN purpose TEXT NOT NULL DEFAULT 'operations';

CREATE INDEX runs_subject ON runs (tenant_id, subject, created_at)
    WHERE subject IS NOT NULL;

CREATE TABLE consents (
    seq        INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant_id  TEXT NOT NULL,
    subject    TEXT NOT NULL,
    purpose    TEXT NOT NULL,
    state      TEXT NOT NULL CHECK (state IN ('granted', 'withdrawn')),
    reference  TEXT,
    recorded_by TEXT NOT NULL,
    at         REAL NOT NULL
);

CREATE INDEX consents_subject ON consents (tenant_id, subject, purpose, seq);

CREATE TRIGGER consents_no_update BEFORE UPDATE ON consents
BEGIN
    SELECT RAISE(ABORT, 'consent records are append-only');
END;

CREATE TRIGGER consents_no_delete BEFORE DELETE ON consents
BEGIN
    SELECT RAISE(ABORT, 'consent records are append-only');
END;

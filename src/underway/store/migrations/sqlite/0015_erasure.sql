-- Erasure by crypto-shredding (underway.erasure): each erasure of a data subject, as an
-- append-only log no statement may change or delete; and the data subject a knowledge
-- record is about, so that erasing the subject removes those records too.
CREATE TABLE erasures (
    seq        INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant_id  TEXT NOT NULL,
    subject    TEXT NOT NULL,
    erased_at  REAL NOT NULL,
    erased_by  TEXT NOT NULL,
    reason     TEXT NOT NULL,
    runs       INTEGER NOT NULL,
    knowledge  INTEGER NOT NULL,
    keys       INTEGER NOT NULL,
    vault      TEXT NOT NULL
);

CREATE INDEX erasures_subject ON erasures (tenant_id, subject, seq);

CREATE TRIGGER erasures_no_update BEFORE UPDATE ON erasures
BEGIN
    SELECT RAISE(ABORT, 'the erasure log is append-only');
END;

CREATE TRIGGER erasures_no_delete BEFORE DELETE ON erasures
BEGIN
    SELECT RAISE(ABORT, 'the erasure log is append-only');
END;

ALTER TABLE knowledge ADD COLUMN subject TEXT;

CREATE INDEX knowledge_subject ON knowledge (tenant_id, subject) WHERE subject IS NOT NULL;

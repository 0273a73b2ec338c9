-- Data protection: the data subject and purpose of each run, on its row so that a
-- subject's runs are found on one index (to erase, hold or answer for them); and the
-- consent of each subject per purpose, as an append-only record of grants and withdrawals
-- that no statement may change or delete (TRUNCATE included).
ALTER TABLE runs ADD COLUMN subject text;
ALTER TABLE runs ADD COLUMN purpose text NOT NULL DEFAULT 'operations';

CREATE INDEX runs_subject ON runs (tenant_id, subject, created_at)
    WHERE subject IS NOT NULL;

CREATE TABLE consents (
    seq        bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id  text             NOT NULL,
    subject    text             NOT NULL,
    purpose    text             NOT NULL,
    state      text             NOT NULL CHECK (state IN ('granted', 'withdrawn')),
    reference  text,
    recorded_by text            NOT NULL,
    at         double precision NOT NULL
);

CREATE INDEX consents_subject ON consents (tenant_id, subject, purpose, seq);

CREATE FUNCTION consents_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'consent records are append-only';
END;
$$;

CREATE TRIGGER consents_no_change BEFORE UPDATE OR DELETE ON consents
    FOR EACH ROW EXECUTE FUNCTION consents_append_only();

CREATE TRIGGER consents_no_truncate BEFORE TRUNCATE ON consents
    FOR EACH STATEMENT EXECUTE FUNCTION consents_append_only();

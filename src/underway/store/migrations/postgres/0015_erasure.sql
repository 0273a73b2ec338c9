-- Erasure by crypto-shredding (underway.erasure): each erasure of a data subject, as an
-- append-only log no statement may change or delete (TRUNCATE included); and the data
-- subject a knowledge record is about, so that erasing the subject removes those records.
CREATE TABLE erasures (
    seq        bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id  text             NOT NULL,
    subject    text             NOT NULL,
    erased_at  double precision NOT NULL,
    erased_by  text             NOT NULL,
    reason     text             NOT NULL,
    runs       integer          NOT NULL,
    knowledge  integer          NOT NULL,
    keys       integer          NOT NULL,
    vault      text             NOT NULL
);

CREATE INDEX erasures_subject ON erasures (tenant_id, subject, seq);

CREATE FUNCTION erasures_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'the erasure log is append-only';
END;
$$;

CREATE TRIGGER erasures_no_change BEFORE UPDATE OR DELETE ON erasures
    FOR EACH ROW EXECUTE FUNCTION erasures_append_only();

CREATE TRIGGER erasures_no_truncate BEFORE TRUNCATE ON erasures
    FOR EACH STATEMENT EXECUTE FUNCTION erasures_append_only();

ALTER TABLE knowledge ADD COLUMN subject text;

CREATE INDEX knowledge_subject ON knowledge (tenant_id, subject) WHERE subject IS NOT NULL;

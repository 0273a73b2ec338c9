-- Checkpoints a newer one replaced, kept: the state after any event of a long run is the
-- nearest checkpoint at or before it plus at most one interval of events, never a fold
-- from the first event. They are copied by the database as the checkpoint row is
-- replaced (same transaction), and dropped with the run's checkpoint. Each is checked
-- against the journal when read, like the current one: the event at its seq commits to
-- its digest.
CREATE TABLE checkpoint_history (
    tenant_id text   NOT NULL,
    run_id    text   NOT NULL,
    seq       bigint NOT NULL,
    state     bytea  NOT NULL,
    PRIMARY KEY (tenant_id, run_id, seq)
);

CREATE FUNCTION checkpoint_replaced() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.seq < NEW.seq THEN
        INSERT INTO checkpoint_history (tenant_id, run_id, seq, state)
        VALUES (OLD.tenant_id, OLD.run_id, OLD.seq, OLD.state)
        ON CONFLICT DO NOTHING;
    END IF;
    RETURN NULL;
END;
$$;

CREATE TRIGGER checkpoint_replaced AFTER UPDATE ON checkpoints
    FOR EACH ROW EXECUTE FUNCTION checkpoint_replaced();

CREATE FUNCTION checkpoint_dropped() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM checkpoint_history
     WHERE tenant_id = OLD.tenant_id AND run_id = OLD.run_id;
    RETURN NULL;
END;
$$;

CREATE TRIGGER checkpoint_dropped AFTER DELETE ON checkpoints
    FOR EACH ROW EXECUTE FUNCTION checkpoint_dropped();

-- Checkpoints a newer one replaced, kept: the state after any event of a long run is the
-- nearest checkpoint at or before it plus at most one interval of events, never a fold
-- from the first event. They are copied by the database as the checkpoint row is
-- replaced (same transaction), and dropped with the run's checkpoint. Each is checked
-- against the journal when read, like the current one: the event at its seq commits to
-- its digest.
CREATE TABLE checkpoint_history (
    tenant_id TEXT    NOT NULL,
    run_id    TEXT    NOT NULL,
    seq       INTEGER NOT NULL,
    state     BLOB    NOT NULL,
    PRIMARY KEY (tenant_id, run_id, seq)
) WITHOUT ROWID;

CREATE TRIGGER checkpoint_replaced AFTER UPDATE ON checkpoints
WHEN OLD.seq < NEW.seq
BEGIN
    INSERT OR IGNORE INTO checkpoint_history (tenant_id, run_id, seq, state)
    VALUES (OLD.tenant_id, OLD.run_id, OLD.seq, OLD.state);
END;

CREATE TRIGGER checkpoint_dropped AFTER DELETE ON checkpoints
BEGIN
    DELETE FROM checkpoint_history
     WHERE tenant_id = OLD.tenant_id AND run_id = OLD.run_id;
END;

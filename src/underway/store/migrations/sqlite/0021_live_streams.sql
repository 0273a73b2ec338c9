-- The live stream of the model calls a run streams (underway.store.streams): deltas
-- written while a call runs, read by consumers in other processes. A cache of the call
-- in flight: the journal keeps the complete reply. AUTOINCREMENT never reuses an offset,
-- even after rows are deleted, so a reader's offset stays valid.
CREATE TABLE stream_deltas (
    stream_offset INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant_id     TEXT    NOT NULL,
    run_id        TEXT    NOT NULL,
    call_key      TEXT    NOT NULL,
    step          TEXT    NOT NULL,
    call_index    INTEGER NOT NULL,
    attempt       INTEGER NOT NULL,
    delta         TEXT    NOT NULL,
    written_at    REAL    NOT NULL
);
CREATE INDEX stream_deltas_run ON stream_deltas (tenant_id, run_id, stream_offset);
CREATE INDEX stream_deltas_written ON stream_deltas (written_at);

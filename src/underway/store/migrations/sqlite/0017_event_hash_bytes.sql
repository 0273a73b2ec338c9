-- Each event's chain hash as its 32 bytes, not 64 hex digits: a third of an event row's
-- bytes that were not its payload. The store reads and writes hex as before (`unhex(?)`
-- in, `lower(hex(hash))` out), so nothing above the SQL changes. SQLite cannot change a
-- column's type in place: the table is rebuilt (same key, still WITHOUT ROWID). A value
-- that is not 64 lower-case hex digits (an edited row) is kept as its bytes, and verifies
-- as the mismatch it was.
CREATE TABLE events_0017 (
    tenant_id TEXT    NOT NULL,
    run_id    TEXT    NOT NULL,
    seq       INTEGER NOT NULL,
    type      TEXT    NOT NULL,
    payload   BLOB    NOT NULL,
    hash      BLOB    NOT NULL,
    PRIMARY KEY (tenant_id, run_id, seq)
) WITHOUT ROWID;

INSERT INTO events_0017 (tenant_id, run_id, seq, type, payload, hash)
SELECT tenant_id, run_id, seq, type, payload,
       CASE WHEN typeof(hash) = 'text' AND length(hash) = 64
                 AND hash NOT GLOB '*[^0-9a-f]*'
            THEN unhex(hash) ELSE CAST(hash AS BLOB) END
  FROM events;

DROP TABLE events;

ALTER TABLE events_0017 RENAME TO events;

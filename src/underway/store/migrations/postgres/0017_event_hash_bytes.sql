-- Each event's chain hash as its 32 bytes, not 64 hex digits: a third of an event row's
-- bytes that were not its payload. The store reads and writes hex as before
-- (`decode(..., 'hex')` in, `encode(hash, 'hex')` out), so nothing above the SQL changes.
-- A value that is not 64 lower-case hex digits (an edited row) is kept as its bytes, and
-- verifies as the mismatch it was.
ALTER TABLE events ALTER COLUMN hash TYPE bytea USING
    CASE WHEN hash ~ '^[0-9a-f]{64}$' THEN decode(hash, 'hex')
         ELSE convert_to(hash, 'UTF8') END;

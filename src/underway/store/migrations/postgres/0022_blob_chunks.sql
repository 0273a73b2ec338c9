-- The chunks of blobs too large to hold in one row (underway._chunked): a chunked blob's
-- row in blobs holds its manifest, and its content is here, a row a chunk. Chunks are
-- written before the blob's row, so a crash between them leaves only chunks nothing
-- refers to; the blob collector removes them.
CREATE TABLE blob_chunks (
    tenant_id  TEXT             NOT NULL,
    key        TEXT             NOT NULL,
    idx        INTEGER          NOT NULL,
    data       BYTEA            NOT NULL,
    written_at DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (tenant_id, key, idx)
);
ALTER TABLE blob_chunks ALTER COLUMN data SET STORAGE EXTERNAL;

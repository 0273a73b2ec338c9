-- Encryption at rest (underway.crypto): each tenant's data keys, stored only wrapped by a
-- key-encryption key that a key provider holds outside the database. A sealed payload names
-- the key that sealed it; one key per tenant and scope is active (new payloads are sealed
-- with it), retired keys only open what they sealed, a destroyed key's bytes are gone.
CREATE TABLE data_keys (
    tenant_id  TEXT NOT NULL,
    key_id     TEXT NOT NULL,
    scope      TEXT NOT NULL DEFAULT '',
    wrapped    BLOB NOT NULL,
    kek_id     TEXT NOT NULL,
    created_at REAL NOT NULL,
    state      TEXT NOT NULL CHECK (state IN ('active', 'retired', 'destroyed')),
    PRIMARY KEY (tenant_id, key_id)
) WITHOUT ROWID;

CREATE UNIQUE INDEX data_keys_active ON data_keys (tenant_id, scope) WHERE state = 'active';

-- A knowledge record's text, source and metadata sealed together; its text column then
-- holds blind index terms (keyed hashes of its words) for the full-text index.
ALTER TABLE knowledge ADD COLUMN sealed BLOB;

-- underway serve: API keys (only a hash of each token), the secrets that sign intake
-- webhooks (kept as given: an HMAC needs the secret itself), and the access log of reads
-- of run data, which no statement may change or delete.
CREATE TABLE api_keys (
    key_id      TEXT NOT NULL PRIMARY KEY,
    tenant_id   TEXT NOT NULL,
    role        TEXT NOT NULL,
    name        TEXT NOT NULL,
    token_hash  TEXT NOT NULL,
    created_at  REAL NOT NULL,
    revoked_at  REAL
) WITHOUT ROWID;

CREATE INDEX api_keys_tenant ON api_keys (tenant_id, created_at);

CREATE TABLE intake_secrets (
    tenant_id  TEXT NOT NULL,
    source     TEXT NOT NULL,
    secret     TEXT NOT NULL,
    created_at REAL NOT NULL,
    PRIMARY KEY (tenant_id, source)
) WITHOUT ROWID;

CREATE TABLE access_log (
    seq        INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant_id  TEXT NOT NULL,
    at         REAL NOT NULL,
    key_id     TEXT NOT NULL,
    key_name   TEXT NOT NULL,
    run_id     TEXT NOT NULL,
    endpoint   TEXT NOT NULL
);

CREATE INDEX access_log_tenant ON access_log (tenant_id, seq DESC);

CREATE TRIGGER access_log_no_update BEFORE UPDATE ON access_log
BEGIN
    SELECT RAISE(ABORT, 'the access log is append-only');
END;

CREATE TRIGGER access_log_no_delete BEFORE DELETE ON access_log
BEGIN
    SELECT RAISE(ABORT, 'the access log is append-only');
END;

-- underway serve: API keys (only a hash of each token), the secrets that sign intake
-- webhooks (kept as given: an HMAC needs the secret itself), and the access log of reads
-- of run data, which no statement may change or delete (TRUNCATE included).
CREATE TABLE api_keys (
    key_id      text             NOT NULL PRIMARY KEY,
    tenant_id   text             NOT NULL,
    role        text             NOT NULL,
    name        text             NOT NULL,
    token_hash  text             NOT NULL,
    created_at  double precision NOT NULL,
    revoked_at  double precision
);

CREATE INDEX api_keys_tenant ON api_keys (tenant_id, created_at);

CREATE TABLE intake_secrets (
    tenant_id  text             NOT NULL,
    source     text             NOT NULL,
    secret     text             NOT NULL,
    created_at double precision NOT NULL,
    PRIMARY KEY (tenant_id, source)
);

CREATE TABLE access_log (
    seq        bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id  text             NOT NULL,
    at         double precision NOT NULL,
    key_id     text             NOT NULL,
    key_name   text             NOT NULL,
    run_id     text             NOT NULL,
    endpoint   text             NOT NULL
);

CREATE INDEX access_log_tenant ON access_log (tenant_id, seq DESC);

CREATE FUNCTION access_log_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'the access log is append-only';
END;
$$;

CREATE TRIGGER access_log_no_change BEFORE UPDATE OR DELETE ON access_log
    FOR EACH ROW EXECUTE FUNCTION access_log_append_only();

CREATE TRIGGER access_log_no_truncate BEFORE TRUNCATE ON access_log
    FOR EACH STATEMENT EXECUTE FUNCTION access_log_append_only();

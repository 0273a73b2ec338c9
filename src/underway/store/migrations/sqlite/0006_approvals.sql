-- Signed approvals: the approvers registered in each tenant (their Ed25519 public keys and
-- roles) and every decision nonce ever accepted, so a signed decision works only once.
CREATE TABLE approvers (
    tenant_id   TEXT NOT NULL,
    approver_id TEXT NOT NULL,
    public_key  TEXT NOT NULL,
    roles       TEXT NOT NULL,
    created_at  REAL NOT NULL,
    revoked_at  REAL,
    PRIMARY KEY (tenant_id, approver_id)
) WITHOUT ROWID;

CREATE TABLE approval_nonces (
    tenant_id  TEXT NOT NULL,
    nonce      TEXT NOT NULL,
    run_id     TEXT NOT NULL,
    request_id TEXT NOT NULL,
    used_at    REAL NOT NULL,
    PRIMARY KEY (tenant_id, nonce)
) WITHOUT ROWID;

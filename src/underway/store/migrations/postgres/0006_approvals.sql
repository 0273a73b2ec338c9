-- Signed approvals: the approvers registered in each tenant (their Ed25519 public keys and
-- roles) and every decision nonce ever accepted, so a signed decision works only once.
CREATE TABLE approvers (
    tenant_id   text             NOT NULL,
    approver_id text             NOT NULL,
    public_key  text             NOT NULL,
    roles       text[]           NOT NULL,
    created_at  double precision NOT NULL,
    revoked_at  double precision,
    PRIMARY KEY (tenant_id, approver_id)
);

CREATE TABLE approval_nonces (
    tenant_id  text             NOT NULL,
    nonce      text             NOT NULL,
    run_id     text             NOT NULL,
    request_id text             NOT NULL,
    used_at    double precision NOT NULL,
    PRIMARY KEY (tenant_id, nonce)
);

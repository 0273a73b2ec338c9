-- Queue limits: a global concurrency limit and a rate limit on starts per queue, checked
-- in the claim transaction. A queue without a row here has no limits.
CREATE TABLE queues (
    name            TEXT    PRIMARY KEY,
    max_concurrency INTEGER,
    rate_limit      INTEGER,
    rate_period_s   REAL    NOT NULL,
    per_tenant      INTEGER NOT NULL,
    updated_at      REAL    NOT NULL
);

-- Token buckets of rate-limited queues: tokens as of updated_at. tenant_id is '*' for a
-- queue's shared bucket, else the tenant whose starts the bucket counts.
CREATE TABLE queue_buckets (
    queue      TEXT NOT NULL,
    tenant_id  TEXT NOT NULL,
    tokens     REAL NOT NULL,
    updated_at REAL NOT NULL,
    PRIMARY KEY (queue, tenant_id)
);

-- Claims walk the (queue, tenant) pairs that have scheduled runs and take the earliest due
-- runs of each, so a fair claim costs the same however many runs one tenant has due.
CREATE INDEX runs_fair ON runs (queue, tenant_id, next_wake_at) WHERE next_wake_at IS NOT NULL;

-- The runs leased right now, for the concurrency limits and for fair turns: a tenant's
-- runs in flight count against its next turn.
CREATE INDEX runs_leased ON runs (queue, tenant_id) WHERE lease_owner IS NOT NULL;

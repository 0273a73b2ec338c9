-- Queue limits: a global concurrency limit and a rate limit on starts per queue, checked
-- in the claim transaction. A queue without a row here has no limits.
CREATE TABLE queues (
    name            text             PRIMARY KEY,
    max_concurrency integer,
    rate_limit      integer,
    rate_period_s   double precision NOT NULL,
    per_tenant      boolean          NOT NULL,
    updated_at      double precision NOT NULL
);

-- Token buckets of rate-limited queues: tokens as of updated_at. tenant_id is '*' for a
-- queue's shared bucket, else the tenant whose starts the bucket counts.
CREATE TABLE queue_buckets (
    queue      text             NOT NULL,
    tenant_id  text             NOT NULL,
    tokens     double precision NOT NULL,
    updated_at double precision NOT NULL,
    PRIMARY KEY (queue, tenant_id)
);

-- Claims walk the (queue, tenant) pairs that have scheduled runs and take the earliest due
-- runs of each, so a fair claim costs the same however many runs one tenant has due.
CREATE INDEX runs_fair ON runs (queue, tenant_id, next_wake_at) WHERE next_wake_at IS NOT NULL;

-- The runs leased right now, for the concurrency limits and for fair turns: a tenant's
-- runs in flight count against its next turn.
CREATE INDEX runs_leased ON runs (queue, tenant_id) WHERE lease_owner IS NOT NULL;

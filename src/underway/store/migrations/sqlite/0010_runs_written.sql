-- The runs written since an instant (their row is written with their last event whenever
-- they change status or are handed back): which journals can hold a tenant's events of a
-- window of days, read without visiting every run the tenant ever had.
CREATE INDEX runs_written ON runs (tenant_id, updated_at);

-- Rows written since a time, across tenants: a worker's look for suspect rows covers
-- only the rows written since its last look (LeaseStore.suspect_runs with since).
CREATE INDEX runs_updated ON runs (updated_at);

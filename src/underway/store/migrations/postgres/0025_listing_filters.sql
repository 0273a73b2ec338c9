-- The runs list filtered by status, by flow, or by both, reads an index in the listing's
-- order (newest first, then run id) from the cursor on, and stops at the page: no sort,
-- no scan of the tenant's other runs. The status index also serves counts by status.
-- It replaces runs_status, whose order ended at created_at.
CREATE INDEX runs_listing_status ON runs (tenant_id, status, created_at DESC, run_id COLLATE "C");
CREATE INDEX runs_listing_flow ON runs (tenant_id, flow, created_at DESC, run_id COLLATE "C");
CREATE INDEX runs_listing_flow_status
    ON runs (tenant_id, flow, status, created_at DESC, run_id COLLATE "C");
DROP INDEX runs_status;

-- Listing a tenant's runs newest first, a page after a (created_at, run_id) cursor, reads
-- this index in order instead of sorting every run of the tenant.
CREATE INDEX runs_listing ON runs (tenant_id, created_at DESC, run_id COLLATE "C");

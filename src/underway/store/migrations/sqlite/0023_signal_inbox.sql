-- The inbox read by what a run acts on, never by what it has consumed or ignores. Only
-- unconsumed signals are indexed: the control signals an activation always takes, and every
-- signal by name, so the oldest one a waiting run wants is one probe. A run that consumed
-- 100,000 signals, or leaves 100,000 unread, reads its inbox at the cost of its first.
CREATE INDEX signals_waiting ON signals (tenant_id, run_id, name, created_at, signal_id)
    WHERE consumed = 0;
CREATE INDEX signals_control ON signals (tenant_id, run_id, created_at, signal_id)
    WHERE consumed = 0 AND name LIKE 'underway.%';

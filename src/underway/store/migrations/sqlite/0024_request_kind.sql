-- What a run waits for a person to do ('approval', 'question', 'resolution'): a projection
-- of the journal, written with the status in the same statement, so /metrics counts the
-- requests on a partial index instead of reading journals. A run held for approval is
-- known from its row; an escalated or dead run's kind is in its journal, so its row gets
-- it at its next change, or when a worker or the audit heals the row.
ALTER TABLE runs ADD COLUMN request_kind TEXT;
UPDATE runs SET request_kind = 'approval'
 WHERE status = 'waiting' AND waiting_signal = 'underway.approval';
CREATE INDEX runs_requests ON runs (tenant_id, status, request_kind)
    WHERE request_kind IS NOT NULL;

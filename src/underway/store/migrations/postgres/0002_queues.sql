-- Named queues: every run belongs to one; workers serve the queues they are given.
ALTER TABLE runs ADD COLUMN queue text NOT NULL DEFAULT 'default';
CREATE INDEX runs_queue_due ON runs (queue, next_wake_at) WHERE next_wake_at IS NOT NULL;

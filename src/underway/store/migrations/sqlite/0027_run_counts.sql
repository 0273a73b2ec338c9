-- Runs by tenant, status and request kind, kept by triggers in the transaction that
-- inserts, deletes or changes a run: a scrape of /metrics sums these rows instead of
-- counting every entry of an index, so its cost does not grow with the runs table.
-- SQLite has one writer at a time, so one row a key ('slot' 0) queues nothing that is
-- not queued already. 'kind' is the run's request_kind, or '' when it has none.
CREATE TABLE run_counts (
    tenant_id TEXT    NOT NULL,
    status    TEXT    NOT NULL,
    kind      TEXT    NOT NULL,
    slot      INTEGER NOT NULL,
    n         INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, status, kind, slot)
) WITHOUT ROWID;

INSERT INTO run_counts (tenant_id, status, kind, slot, n)
SELECT tenant_id, status, coalesce(request_kind, ''), 0, COUNT(*)
  FROM runs GROUP BY tenant_id, status, coalesce(request_kind, '');

CREATE TRIGGER runs_counted AFTER INSERT ON runs
BEGIN
    INSERT INTO run_counts (tenant_id, status, kind, slot, n)
    VALUES (NEW.tenant_id, NEW.status, coalesce(NEW.request_kind, ''), 0, 1)
    ON CONFLICT (tenant_id, status, kind, slot) DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER runs_uncounted AFTER DELETE ON runs
BEGIN
    UPDATE run_counts SET n = n - 1
     WHERE tenant_id = OLD.tenant_id AND status = OLD.status
       AND kind = coalesce(OLD.request_kind, '') AND slot = 0;
    DELETE FROM run_counts WHERE tenant_id = OLD.tenant_id AND n = 0;
END;

CREATE TRIGGER runs_recounted AFTER UPDATE OF tenant_id, status, request_kind ON runs
WHEN OLD.tenant_id IS NOT NEW.tenant_id OR OLD.status IS NOT NEW.status
  OR OLD.request_kind IS NOT NEW.request_kind
BEGIN
    UPDATE run_counts SET n = n - 1
     WHERE tenant_id = OLD.tenant_id AND status = OLD.status
       AND kind = coalesce(OLD.request_kind, '') AND slot = 0;
    INSERT INTO run_counts (tenant_id, status, kind, slot, n)
    VALUES (NEW.tenant_id, NEW.status, coalesce(NEW.request_kind, ''), 0, 1)
    ON CONFLICT (tenant_id, status, kind, slot) DO UPDATE SET n = n + 1;
END;

-- Runs by tenant, status and request kind, kept by triggers in the transaction that
-- inserts, deletes or changes a run: a scrape of /metrics sums these rows instead of
-- counting every entry of an index, so its cost does not grow with the runs table.
-- 'kind' is the run's request_kind, or '' when it has none.
--
-- Each database connection adds its changes to its own row of a key ('slot' is its
-- backend's pid; the backfill and folded rows are slot 0). A backend runs one
-- transaction at a time, so no two transactions ever wait for each other on a count,
-- and none can deadlock on one: the status changes of a tenant are not queued on a hot
-- row. A scrape sums a key's slots. Rows of backends that are gone are folded into
-- slot 0 (run_counts_fold in postgres.sql) when they pile up.
CREATE TABLE run_counts (
    tenant_id text    NOT NULL,
    status    text    NOT NULL,
    kind      text    NOT NULL,
    slot      integer NOT NULL,
    n         bigint  NOT NULL,
    PRIMARY KEY (tenant_id, status, kind, slot)
);

INSERT INTO run_counts (tenant_id, status, kind, slot, n)
SELECT tenant_id, status, coalesce(request_kind, ''), 0, COUNT(*)
  FROM runs GROUP BY 1, 2, 3;

-- A change of one run: -1 to its old key, +1 to its new one (a row trigger, fired only
-- when the tenant, status or request kind changes, so a step that goes on pays nothing).
CREATE FUNCTION runs_recounted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO run_counts AS c (tenant_id, status, kind, slot, n)
    VALUES (OLD.tenant_id, OLD.status, coalesce(OLD.request_kind, ''), pg_backend_pid(), -1)
    ON CONFLICT (tenant_id, status, kind, slot) DO UPDATE SET n = c.n - 1;
    INSERT INTO run_counts AS c (tenant_id, status, kind, slot, n)
    VALUES (NEW.tenant_id, NEW.status, coalesce(NEW.request_kind, ''), pg_backend_pid(), 1)
    ON CONFLICT (tenant_id, status, kind, slot) DO UPDATE SET n = c.n + 1;
    RETURN NULL;
END;
$$;

CREATE TRIGGER runs_recounted AFTER UPDATE OF tenant_id, status, request_kind ON runs
    FOR EACH ROW
    WHEN (OLD.tenant_id IS DISTINCT FROM NEW.tenant_id
          OR OLD.status IS DISTINCT FROM NEW.status
          OR OLD.request_kind IS DISTINCT FROM NEW.request_kind)
    EXECUTE FUNCTION runs_recounted();

-- Runs inserted or deleted: one upsert a key for the whole statement (statement
-- triggers over the statement's rows), so a statement that inserts or deletes a million
-- runs updates each count once, not a million times.
CREATE FUNCTION runs_counted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO run_counts AS c (tenant_id, status, kind, slot, n)
    SELECT tenant_id, status, coalesce(request_kind, ''), pg_backend_pid(), COUNT(*)
      FROM added GROUP BY 1, 2, 3 ORDER BY 1, 2, 3
    ON CONFLICT (tenant_id, status, kind, slot) DO UPDATE SET n = c.n + EXCLUDED.n;
    RETURN NULL;
END;
$$;

CREATE TRIGGER runs_counted AFTER INSERT ON runs
    REFERENCING NEW TABLE AS added
    FOR EACH STATEMENT EXECUTE FUNCTION runs_counted();

CREATE FUNCTION runs_uncounted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO run_counts AS c (tenant_id, status, kind, slot, n)
    SELECT tenant_id, status, coalesce(request_kind, ''), pg_backend_pid(), -COUNT(*)
      FROM removed GROUP BY 1, 2, 3 ORDER BY 1, 2, 3
    ON CONFLICT (tenant_id, status, kind, slot) DO UPDATE SET n = c.n + EXCLUDED.n;
    RETURN NULL;
END;
$$;

CREATE TRIGGER runs_uncounted AFTER DELETE ON runs
    REFERENCING OLD TABLE AS removed
    FOR EACH STATEMENT EXECUTE FUNCTION runs_uncounted();

CREATE FUNCTION runs_truncated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM run_counts;
    RETURN NULL;
END;
$$;

CREATE TRIGGER runs_truncated AFTER TRUNCATE ON runs
    FOR EACH STATEMENT EXECUTE FUNCTION runs_truncated();

-- Run labels: a projection of the journal's RunStarted and RunLabeled events. `value` is
-- the value's text (what a filter compares), `kind` its type. A filter reads the
-- (tenant_id, key, value) index.
CREATE TABLE run_labels (
    tenant_id TEXT NOT NULL,
    run_id    TEXT NOT NULL,
    key       TEXT NOT NULL,
    value     TEXT NOT NULL,
    kind      TEXT NOT NULL DEFAULT 'str',
    sensitive INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant_id, run_id, key)
);

CREATE INDEX run_labels_value ON run_labels (tenant_id, key, value);

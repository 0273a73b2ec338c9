-- How far each run's journal has been exported as spans (underway.telemetry): the
-- exporter sends the spans of a run's new events, then moves its cursor.
CREATE TABLE span_exports (
    tenant_id    TEXT    NOT NULL,
    run_id       TEXT    NOT NULL,
    exported_seq INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, run_id)
);

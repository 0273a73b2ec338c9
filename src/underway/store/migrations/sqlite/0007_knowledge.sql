-- Long-term knowledge, kept apart from run execution state: one row per (tenant, id).
-- seq is the row's stable integer key (VACUUM may renumber an implicit rowid), which the
-- full-text index refers to; roles is a JSON array of role names, metadata a JSON object.
CREATE TABLE knowledge (
    seq         INTEGER PRIMARY KEY,
    tenant_id   TEXT    NOT NULL,
    id          TEXT    NOT NULL,
    text        TEXT    NOT NULL,
    source      TEXT    NOT NULL,
    created_at  REAL    NOT NULL,
    expires_at  REAL,
    roles       TEXT    NOT NULL DEFAULT '[]',
    sensitivity TEXT    NOT NULL
        CHECK (sensitivity IN ('public', 'internal', 'personal', 'sensitive')),
    metadata    TEXT    NOT NULL DEFAULT '{}',
    UNIQUE (tenant_id, id)
);

CREATE INDEX knowledge_expiry ON knowledge (expires_at) WHERE expires_at IS NOT NULL;

-- The words of each record's text, kept in step with the knowledge table by the code that
-- writes it (external content: the text is stored once). No diacritics folding, so every
-- backend matches the same words.
CREATE VIRTUAL TABLE knowledge_fts USING fts5(
    text, content='knowledge', content_rowid='seq', tokenize='unicode61 remove_diacritics 0'
);

-- Long-term knowledge, kept apart from run execution state: one row per (tenant, id).
-- tsv holds the words of the text: 'simple' lower-cases them without stemming or stop
-- words, so every language is matched alike; the punctuation that PostgreSQL's parser would
-- glue into e-mail, URL, path, number and tag tokens becomes blanks first, so the words are
-- the runs of letters and digits that queries (and the other backends) see.
CREATE TABLE knowledge (
    tenant_id   text             NOT NULL,
    id          text             NOT NULL,
    text        text             NOT NULL,
    source      text             NOT NULL,
    created_at  double precision NOT NULL,
    expires_at  double precision,
    roles       text[]           NOT NULL DEFAULT '{}',
    sensitivity text             NOT NULL
        CHECK (sensitivity IN ('public', 'internal', 'personal', 'sensitive')),
    metadata    jsonb            NOT NULL DEFAULT '{}',
    tsv         tsvector         GENERATED ALWAYS AS (to_tsvector(
                    'simple', translate(text, '@./:_-+~#?=&%\<>', '                ')
                )) STORED,
    PRIMARY KEY (tenant_id, id)
);

CREATE INDEX knowledge_tsv ON knowledge USING gin (tsv);
CREATE INDEX knowledge_expiry ON knowledge (expires_at) WHERE expires_at IS NOT NULL;

-- Knowledge words as underway.knowledge.words splits them: combining marks (the vowel signs
-- and viramas of Indic scripts) belong to their word, where the old index split at them.
-- `terms` holds what a record is indexed under, space-separated: its words, lower-cased in
-- NFC, or their blind terms when the record is sealed. The full-text index is over it, and
-- keeps each term whole (letters, marks and digits are token characters), so SQLite indexes
-- exactly the words the other backends do, and removes an entry with exactly the words it
-- was added with. Existing rows start with their text (or blind terms) as their terms,
-- tokenized with marks kept; `underway knowledge reindex` (KnowledgeBase.reindex) splits
-- them exactly, and gives sealed rows the blind terms of their words split anew.
ALTER TABLE knowledge ADD COLUMN terms TEXT NOT NULL DEFAULT '';

UPDATE knowledge SET terms = text;

DROP TABLE knowledge_fts;

CREATE VIRTUAL TABLE knowledge_fts USING fts5(
    terms, content='knowledge', content_rowid='seq',
    tokenize="unicode61 remove_diacritics 0 categories 'L* M* N* Co'"
);

INSERT INTO knowledge_fts (knowledge_fts) VALUES ('rebuild');

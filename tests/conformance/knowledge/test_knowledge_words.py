"""Words of Indic scripts are whole words on every backend: a vowel sign, a virama or a
nasalisation mark belongs to the word it sits in, so `हिंदी` finds the record that says
`हिंदी` and never the unrelated `हाथ धोना` (whose letters `ह`, `द` a split at the vowel signs
would share). Memory, SQLite and PostgreSQL — and SQLite and PostgreSQL sealed, searching by
blind index terms — find exactly the same records for Devanagari (Hindi, Marathi), Tamil,
Bengali and Latin text."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from fakes.keys import encrypted
from underway.knowledge import KnowledgeBase, KnowledgeRecord, open_knowledge
from underway.knowledge.words import words
from underway.store import connect

T0 = 1_700_000_000.0

RECORDS = {
    "hindi": "ग्राहक हिंदी में बात करना पसंद करते हैं।",
    "hands": "खाने से पहले हाथ धोना ज़रूरी है।",
    "marathi": "ग्राहकाला मराठीत स्मरणपत्र पाठवा; ग्राहक सकाळी उपलब्ध असतात.",
    "tamil": "வாடிக்கையாளர் தமிழில் பேச விரும்புகிறார்.",
    "tamil2": "தமிழ் மொழி நினைவூட்டல் அனுப்பப்பட்டது.",
    "bengali": "গ্রাহক বাংলা ভাষায় অনুস্মারক চান।",
    "latin": "Ananya prefers Hindi reminders; the café in Zürich pays by UPI.",
    "zwj": "क्\u200dष और र्\u200dय वाले शब्द",
}

# Each query, and the records it must find on every backend (order aside).
EXPECTED = {
    "हिंदी": {"hindi"},
    "ग्राहक": {"hindi", "marathi"},
    "ग्राहकाला": {"marathi"},
    "हाथ": {"hands"},
    "ह": set(),  # a bare consonant is no word of either record
    "द": set(),
    "मराठीत": {"marathi"},
    "स्मरणपत्र": {"marathi"},
    "தமிழில்": {"tamil"},
    "தமிழ்": {"tamil2"},
    "த": set(),
    "বাংলা": {"bengali"},
    "অনুস্মারক": {"bengali"},
    "hindi": {"latin"},
    "ZÜRICH": {"latin"},
    "zu\u0308rich": {"latin"},  # decomposed, the same word
    "café upi": {"latin"},
    "क्ष": {"zwj"},  # the joiner shapes the conjunct; it is no part of the word
    "क्\u200dष": {"zwj"},
    "र्\u200dय": {"zwj"},
    "हिंदी தமிழில் বাংলা": {"hindi", "tamil", "bengali"},
}


def put_all(kb: KnowledgeBase) -> None:
    for id_, text in RECORDS.items():
        kb.put(KnowledgeRecord(id=id_, tenant_id="acme", text=text, source="system",
                               created_at=T0))


def found(kb: KnowledgeBase, query: str) -> set[str]:
    return {h.record.id for h in kb.search("acme", query, roles=(), now=T0 + 1, limit=50)}


def test_indic_words_keep_their_vowel_signs_and_viramas() -> None:
    assert words("हिंदी में ग्राहक") == ["हिंदी", "में", "ग्राहक"]
    assert words("தமிழில் பேசு") == ["தமிழில்", "பேசு"]
    assert words("বাংলা ভাষায়") == ["বাংলা", "ভাষায়"]
    assert words("मराठीत स्मरणपत्र।") == ["मराठीत", "स्मरणपत्र"]
    assert words("हाथ धोना") == ["हाथ", "धोना"]
    # Joiners and soft hyphens inside a word are dropped; marks stay; NFC throughout.
    assert words("क्\u200dष ex\u00adample") == ["क्ष", "example"]
    assert words("one\u200btwo") == ["one", "two"]  # the zero-width space separates
    assert words("𠀀𠀁 mixed𠀀x 𑂍𑂺") == ["𠀀𠀁", "mixed𠀀x", "𑂍𑂺"]  # beyond the BMP too
    assert words("Re\u0301union à Zürich") == ["réunion", "à", "zürich"]
    # Punctuation still separates: codes and addresses are their parts.
    assert words("INV-2024-001 ananya@acme.example") == ["inv", "2024", "001", "ananya",
                                                         "acme", "example"]


def test_every_backend_finds_the_same_records(knowledge: KnowledgeBase) -> None:
    put_all(knowledge)
    assert {query: found(knowledge, query) for query in EXPECTED} == EXPECTED


def test_more_words_of_the_query_rank_first(knowledge: KnowledgeBase) -> None:
    put_all(knowledge)
    hits = knowledge.search("acme", "ग्राहक मराठीत", roles=(), now=T0 + 1)
    assert [h.record.id for h in hits] == ["marathi", "hindi"]


def test_a_deleted_indic_record_takes_its_words_with_it(knowledge: KnowledgeBase) -> None:
    put_all(knowledge)
    assert knowledge.delete("acme", "tamil")
    assert found(knowledge, "தமிழில்") == set()
    knowledge.put(KnowledgeRecord(id="hindi", tenant_id="acme", text="अब अंग्रेज़ी में",
                                  source="system", created_at=T0))
    assert found(knowledge, "हिंदी") == set()
    assert found(knowledge, "अंग्रेज़ी") == {"hindi"}


def test_reindexing_changes_no_hit(knowledge: KnowledgeBase) -> None:
    put_all(knowledge)
    before = {q: found(knowledge, q) for q in EXPECTED}
    done = knowledge.reindex()
    assert (done.records, done.sealed_without_keys) == (len(RECORDS), 0)
    assert knowledge.reindex(tenant_id="globex").records == 0
    assert {q: found(knowledge, q) for q in EXPECTED} == before


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def sealed(request: pytest.FixtureRequest) -> Iterator[KnowledgeBase]:
    """A knowledge base whose store seals records: indexed by blind terms."""
    url = str(request.getfixturevalue("sqlite_url" if request.param == "sqlite"
                                      else "pg_url"))
    store = connect(url)
    encrypted(store)
    kb = open_knowledge(store)
    yield kb
    kb.close()
    store.close()


def test_sealed_records_are_found_by_the_same_words(sealed: KnowledgeBase) -> None:
    put_all(sealed)
    assert {query: found(sealed, query) for query in EXPECTED} == EXPECTED


def test_sealed_records_reindex_with_their_keys(sealed: KnowledgeBase) -> None:
    put_all(sealed)
    done = sealed.reindex(tenant_id="acme")
    assert (done.records, done.sealed_without_keys) == (len(RECORDS), 0)
    assert found(sealed, "हिंदी") == {"hindi"}
    assert found(sealed, "ग्राहक") == {"hindi", "marathi"}

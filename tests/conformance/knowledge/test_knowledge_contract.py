"""The knowledge base contract every backend meets: storing, finding, ranking, tenant
isolation, access roles, sensitivity, retention, erasure and hostile query strings."""

from __future__ import annotations

from typing import Any

import pytest

from underway.errors import ConfigurationError
from underway.knowledge import KnowledgeBase, KnowledgeRecord

T0 = 1_700_000_000.0
DAY = 86_400.0


def rec(text: str, *, id: str, tenant_id: str = "acme", **fields: Any) -> KnowledgeRecord:
    fields.setdefault("source", "https://wiki.acme.example/policies")
    fields.setdefault("created_at", T0)
    return KnowledgeRecord(id=id, tenant_id=tenant_id, text=text, **fields)


def ids(knowledge: KnowledgeBase, query: str, **options: Any) -> list[str]:
    options.setdefault("roles", ())
    options.setdefault("now", T0 + 1)
    options.setdefault("tenant_id", "acme")
    tenant = options.pop("tenant_id")
    return [h.record.id for h in knowledge.search(tenant, query, **options)]


CORPUS = {
    "refund": "Refund policy: customers may ask for a refund within 30 days of delivery.",
    "shipping": "Shipping takes three to five working days inside the country.",
    "returns": "Returns are accepted when the parcel is unopened; see the refund policy.",
    "warranty": "The warranty covers manufacturing defects for two years.",
    "invoice": "Invoices are sent by e-mail on the first working day of the month.",
    "holidays": "The office is closed on public holidays.",
}


@pytest.fixture
def corpus(knowledge: KnowledgeBase) -> KnowledgeBase:
    for id, text in CORPUS.items():
        knowledge.put(rec(text, id=id))
    return knowledge


def test_a_stored_record_reads_back_with_every_field(knowledge: KnowledgeBase) -> None:
    record = rec(
        "Ananya prefers calls after 18:00 — 東京 office, café «Zürich» 🙂",
        id="pref-1", source="tool:crm_lookup", expires_at=T0 + 30 * DAY,
        roles=("support", "sales"), sensitivity="personal",
        metadata={"customer": "C-42", "tags": ["call", "evening"], "score": 0.5, "ok": True},
    )
    knowledge.put(record)
    assert knowledge.get("acme", "pref-1") == record
    assert knowledge.get("acme", "missing") is None


def test_putting_the_same_id_replaces_the_record_and_its_words(
    knowledge: KnowledgeBase,
) -> None:
    knowledge.put(rec("The customer prefers email.", id="pref"))
    knowledge.put(rec("The customer prefers telephone.", id="pref", sensitivity="public"))
    assert knowledge.get("acme", "pref") == rec(
        "The customer prefers telephone.", id="pref", sensitivity="public"
    )
    assert ids(knowledge, "email") == []
    assert ids(knowledge, "telephone") == ["pref"]
    assert ids(knowledge, "customer") == ["pref"]


def test_records_matching_more_query_words_rank_first(corpus: KnowledgeBase) -> None:
    found = ids(corpus, "refund policy delivery")
    assert found[0] == "refund"
    assert set(found) == {"refund", "returns"}
    hits = corpus.search("acme", "refund policy delivery", roles=(), now=T0 + 1)
    assert hits[0].score > hits[1].score


def test_any_query_word_is_enough_and_case_does_not_matter(corpus: KnowledgeBase) -> None:
    assert set(ids(corpus, "WARRANTY parcel")) == {"warranty", "returns"}
    assert ids(corpus, "which days is the office Closed?")[0] == "holidays"
    assert ids(corpus, "nothing matches xyzzy") == []


def test_limit_caps_the_hits(corpus: KnowledgeBase) -> None:
    assert len(ids(corpus, "the", limit=2)) == 2
    assert len(ids(corpus, "the", limit=100)) == 5


def test_a_tenant_never_sees_another_tenants_records(knowledge: KnowledgeBase) -> None:
    knowledge.put(rec("Acme pays invoices by bank transfer.", id="pay", tenant_id="acme"))
    knowledge.put(rec("Globex pays invoices by card.", id="pay", tenant_id="globex"))
    assert [h.record.text for h in knowledge.search("acme", "invoices", roles=(), now=T0)] == [
        "Acme pays invoices by bank transfer."
    ]
    assert ids(knowledge, "card globex") == []
    assert knowledge.delete("globex", "pay")
    assert knowledge.get("acme", "pay") is not None
    assert knowledge.get("globex", "pay") is None


def test_a_record_with_roles_is_read_only_by_those_roles(knowledge: KnowledgeBase) -> None:
    knowledge.put(rec("Salary bands for 2025 are in the HR drive.", id="hr", roles=("hr",)))
    knowledge.put(rec("Budget 2025 draft is ready.", id="fin", roles=("finance", "board")))
    knowledge.put(rec("The 2025 offsite is in May.", id="all"))
    assert ids(knowledge, "2025", roles=()) == ["all"]
    assert set(ids(knowledge, "2025", roles=("support",))) == {"all"}
    assert set(ids(knowledge, "2025", roles=("hr",))) == {"hr", "all"}
    assert set(ids(knowledge, "2025", roles=["board", "hr"])) == {"hr", "fin", "all"}


def test_hidden_records_do_not_crowd_out_visible_ones(knowledge: KnowledgeBase) -> None:
    for n in range(5):
        knowledge.put(rec("refund refund refund policy", id=f"secret-{n}", roles=("legal",)))
    knowledge.put(rec("refund policy for everyone", id="open"))
    assert ids(knowledge, "refund policy", limit=1) == ["open"]


def test_sensitivity_caps_what_a_search_returns(knowledge: KnowledgeBase) -> None:
    for label in ("public", "internal", "personal", "sensitive"):
        knowledge.put(rec(f"customer note, {label}", id=label, sensitivity=label))
    assert set(ids(knowledge, "customer")) == {"public", "internal", "personal", "sensitive"}
    assert set(ids(knowledge, "customer", max_sensitivity="internal")) == {"public", "internal"}
    assert ids(knowledge, "customer", max_sensitivity="public") == ["public"]


def test_an_expired_record_is_never_found_even_before_the_sweeper_runs(
    knowledge: KnowledgeBase,
) -> None:
    knowledge.put(rec("temporary door code 4711", id="code", expires_at=T0 + DAY))
    knowledge.put(rec("permanent door policy", id="policy"))
    assert set(ids(knowledge, "door", now=T0 + DAY - 1)) == {"code", "policy"}
    assert ids(knowledge, "door", now=T0 + DAY) == ["policy"]
    assert knowledge.get("acme", "code", now=T0 + DAY) is None
    assert knowledge.get("acme", "code", now=T0 + DAY - 1) is not None
    assert knowledge.get("acme", "code") is not None  # still stored until swept


def test_purge_erases_expired_records_of_every_tenant_and_nothing_else(
    knowledge: KnowledgeBase,
) -> None:
    knowledge.put(rec("old parcel note", id="a", expires_at=T0 + DAY))
    knowledge.put(rec("old parcel note", id="b", tenant_id="globex", expires_at=T0 + 2 * DAY))
    knowledge.put(rec("later parcel note", id="c", expires_at=T0 + 9 * DAY))
    knowledge.put(rec("kept parcel note", id="d"))
    assert knowledge.purge_expired(T0 + 2 * DAY) == 2
    assert knowledge.purge_expired(T0 + 2 * DAY) == 0
    assert knowledge.get("acme", "a") is None
    assert knowledge.get("globex", "b") is None
    # Searching as of a time before they expired proves the text is gone, not hidden.
    assert set(ids(knowledge, "parcel", now=T0)) == {"c", "d"}
    knowledge.put(rec("new parcel note", id="a"))
    assert sorted(ids(knowledge, "parcel", now=T0)) == ["a", "c", "d"]


def test_delete_erases_a_record_and_its_words(knowledge: KnowledgeBase) -> None:
    knowledge.put(rec("Ananya's phone number is 555-0100", id="phone", sensitivity="personal"))
    knowledge.put(rec("Ananya likes the blue theme", id="theme"))
    assert knowledge.delete("acme", "phone") is True
    assert knowledge.delete("acme", "phone") is False
    assert knowledge.get("acme", "phone") is None
    assert ids(knowledge, "phone number 555") == []
    assert ids(knowledge, "ananya") == ["theme"]


HOSTILE_QUERIES = [
    "",
    "   ",
    '"',
    '"""',
    "'",
    "refund\" OR \"x",
    "AND",
    "OR",
    "NOT",
    "NEAR",
    "refund AND",
    "OR policy",
    "NEAR(refund policy, 2)",
    "refund NOT policy",
    "*",
    "refund*",
    "^refund",
    "text:refund",
    "tenant_id:globex",
    "-refund",
    "+refund -policy",
    "(((refund",
    "refund)))",
    "{refund policy}",
    "refund & policy | !x <-> y:*",
    "'; DROP TABLE knowledge; --",
    "\x00refund",
    "e\u0301migre\u0301 東京 🙂 Zürich",
    "a" * 5000,
    " ".join(f"w{n}" for n in range(500)),
]


@pytest.mark.parametrize("query", HOSTILE_QUERIES)
def test_no_query_string_breaks_a_search(corpus: KnowledgeBase, query: str) -> None:
    hits = corpus.search("acme", query, roles=(), now=T0 + 1)
    assert all(h.record.tenant_id == "acme" for h in hits)


def test_operators_and_punctuation_in_queries_are_plain_words(corpus: KnowledgeBase) -> None:
    assert ids(corpus, "") == []
    assert ids(corpus, "*") == []
    assert ids(corpus, 'NEAR("refund" policy)')[0] == "refund"
    assert ids(corpus, "refund*")[0] == "refund"
    assert ids(corpus, "-warranty") == ["warranty"]  # not a negation
    assert ids(corpus, "text:warranty") == ["warranty"]  # not a column filter
    assert "refund" in ids(corpus, "refund\" OR \"shipping")


def test_words_that_are_query_operators_can_be_found(knowledge: KnowledgeBase) -> None:
    knowledge.put(rec("Near or far, and not only on Sundays", id="ops"))
    knowledge.put(rec("Nothing to see", id="other"))
    for word in ("near", "OR", "and", "NOT"):
        assert ids(knowledge, word) == ["ops"], word


def test_unicode_words_match_whole_and_case_insensitively(knowledge: KnowledgeBase) -> None:
    knowledge.put(rec("Réunion à Zürich avec l'équipe de 東京", id="fr"))
    knowledge.put(rec("Meeting in Zurich", id="en"))
    assert ids(knowledge, "ZÜRICH") == ["fr"]
    assert ids(knowledge, "zurich") == ["en"]
    assert ids(knowledge, "東京") == ["fr"]
    assert ids(knowledge, "re\u0301union") == ["fr"]  # the same word, decomposed


def test_addresses_numbers_and_codes_are_found_by_their_parts(knowledge: KnowledgeBase) -> None:
    knowledge.put(rec(
        "Write to ananya@acme.example about INV-2024-001 (EUR 1200.50), see "
        "https://wiki.acme.example/billing?tab=2#late and C:\\exports\\q3.csv",
        id="ids",
    ))
    for query in ("ananya@acme.example", "acme", "INV-2024-001", "2024", "1200.50", "50",
                  "wiki.acme.example/billing", "billing", "late", "q3.csv", "exports"):
        assert ids(knowledge, query) == ["ids"], query


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        ({"roles": "admin"}, "roles"),
        ({"roles": ("",)}, "roles"),
        ({"limit": 0}, "limit"),
        ({"limit": 10_001}, "limit"),
        ({"max_sensitivity": "secret"}, "sensitivity"),
        ({"tenant_id": ""}, "tenant_id"),
    ],
)
def test_bad_search_arguments_are_refused_by_name(
    knowledge: KnowledgeBase, options: dict[str, Any], problem: str
) -> None:
    args = {"tenant_id": "acme", "roles": (), "now": T0, **options}
    tenant = args.pop("tenant_id")
    with pytest.raises(ConfigurationError, match=problem):
        knowledge.search(tenant, "refund", **args)


def test_put_refuses_what_is_not_a_record(knowledge: KnowledgeBase) -> None:
    with pytest.raises(ConfigurationError, match="KnowledgeRecord"):
        knowledge.put({"tenant_id": "acme", "text": "hi"})  # type: ignore[arg-type]

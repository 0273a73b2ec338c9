"""Every column of the schema, on SQLite and PostgreSQL, is classified: the payload columns
are sealed when encryption is on; the rest hold what scheduling, listing and auditing need
(identifiers, states, times, hashes, key material that is itself protected). A column added
without a class fails here — decide whether it holds personal data (then seal it through
``Codec.seal`` and add it to the canary test) and list it in docs/data-protection.md."""

from __future__ import annotations

import sqlite3

import psycopg
import pytest

from underway.store import connect
from underway.store._urls import split_url

SEALED = "sealed: through Codec.seal, bound to the row's identity"
BLIND = "blind index terms (keyed hashes of words) or their full-text index"
ID = "an identifier or a name (no personal data, by contract)"
STATE = "a status, a counter, a flag, a setting"
TIME = "a time"
HASH = "a hash or a content address"
KEY = "key material, itself protected (wrapped, hashed, public) or a secret kept as given"
NOTE = "a note an operator writes (a legal hold's reason): keep personal data out of it"
LABEL = ("a run label's text, readable so runs are found by it (a sensitive one is shown "
         "redacted, stored as it is): keep personal data out of labels")

COLUMNS: dict[str, dict[str, str]] = {
    "events": {"tenant_id": ID, "run_id": ID, "seq": STATE, "type": ID,
               "payload": SEALED + " (its envelope's type, seq and time readable)",
               "hash": HASH},
    "checkpoints": {"tenant_id": ID, "run_id": ID, "seq": STATE, "state": SEALED},
    "run_counts": {"tenant_id": ID, "status": STATE, "kind": STATE, "slot": STATE,
                   "n": STATE + " (a count of runs)"},
    "checkpoint_history": {"tenant_id": ID, "run_id": ID, "seq": STATE,
                           "state": SEALED + " (a replaced checkpoint's sealed bytes)"},
    "blob_chunks": {"tenant_id": ID, "key": HASH + " (keyed per tenant when sealed)",
                    "idx": STATE, "data": SEALED + " (each chunk its own box)",
                    "written_at": TIME},
    "blobs": {"tenant_id": ID, "key": HASH + " (keyed per tenant when sealed)", "data": SEALED,
              "written_at": TIME},
    "signals": {"tenant_id": ID, "run_id": ID, "signal_id": ID, "name": ID, "payload": SEALED,
                "sender": ID, "created_at": TIME, "consumed": STATE},
    "schedules": {"tenant_id": ID, "name": ID, "flow": ID, "cron": STATE, "timezone": STATE,
                  "input": SEALED, "queue": ID, "next_fire_at": TIME, "enabled": STATE,
                  "created_at": TIME, "last_fired_at": TIME, "claimed_until": TIME},
    "runs": {"tenant_id": ID, "run_id": ID, "flow": ID, "status": STATE, "step": ID,
             "idempotency_key": ID, "last_seq": STATE, "last_hash": HASH,
             "next_wake_at": TIME, "waiting_signal": ID, "control_pending": STATE,
             "lease_owner": ID, "lease_token": STATE, "lease_expires_at": TIME,
             "created_at": TIME, "updated_at": TIME, "error": SEALED + " (a sealed text)",
             "queue": ID, "subject": ID + " (a data subject's opaque id)", "purpose": ID,
             "request_kind": STATE + " (what the run waits for a person to do)"},
    "intake": {"tenant_id": ID, "idempotency_key": ID, "entity_id": ID, "event_type": ID,
               "action": STATE, "run_id": ID, "created_at": TIME},
    "intake_owners": {"tenant_id": ID, "entity_id": ID, "run_id": ID, "since": TIME},
    "knowledge": {"seq": STATE, "tenant_id": ID, "id": ID, "text": BLIND,
                  "source": SEALED + " (in the sealed column)", "created_at": TIME,
                  "expires_at": TIME, "roles": ID, "sensitivity": STATE,
                  "metadata": SEALED + " (in the sealed column)", "sealed": SEALED,
                  "tsv": BLIND, "terms": BLIND, "subject": ID + " (a data subject's opaque id)"},
    "erasures": {"seq": STATE, "tenant_id": ID, "subject": ID + " (a data subject's opaque id)",
                 "erased_at": TIME, "erased_by": ID, "reason": NOTE, "runs": STATE,
                 "knowledge": STATE, "keys": STATE, "vault": STATE},
    "knowledge_fts": {"terms": BLIND},
    "knowledge_fts_config": {"k": STATE, "v": STATE},
    "knowledge_fts_data": {"id": STATE, "block": BLIND},
    "knowledge_fts_docsize": {"id": STATE, "sz": STATE},
    "knowledge_fts_idx": {"segid": STATE, "term": BLIND, "pgno": STATE},
    "data_keys": {"tenant_id": ID, "key_id": ID, "scope": ID, "wrapped": KEY, "kek_id": ID,
                  "created_at": TIME, "state": STATE},
    "circuits": {"tenant_id": ID, "name": ID, "failures": STATE, "open_until": TIME,
                 "trial_until": TIME, "updated_at": TIME},
    "queues": {"name": ID, "max_concurrency": STATE, "rate_limit": STATE,
               "rate_period_s": STATE, "per_tenant": STATE, "updated_at": TIME},
    "queue_buckets": {"queue": ID, "tenant_id": ID, "tokens": STATE, "updated_at": TIME},
    "approvers": {"tenant_id": ID, "approver_id": ID, "public_key": KEY, "roles": ID,
                  "created_at": TIME, "revoked_at": TIME},
    "approval_nonces": {"tenant_id": ID, "nonce": ID, "run_id": ID, "request_id": ID,
                        "used_at": TIME},
    "api_keys": {"key_id": ID, "tenant_id": ID, "role": ID, "name": ID, "token_hash": KEY,
                 "created_at": TIME, "revoked_at": TIME},
    "intake_secrets": {"tenant_id": ID, "source": ID, "secret": KEY, "created_at": TIME},
    "access_log": {"seq": STATE, "tenant_id": ID, "at": TIME, "key_id": ID, "key_name": ID,
                   "run_id": ID, "endpoint": ID, "purpose": ID, "revealed": STATE,
                   "prev_hash": HASH, "hash": HASH},
    "access_log_heads": {"tenant_id": ID, "seq": STATE, "hash": HASH, "entries": STATE},
    "consents": {"seq": STATE, "tenant_id": ID, "subject": ID, "purpose": ID, "state": STATE,
                 "reference": ID, "recorded_by": ID, "at": TIME},
    "legal_holds": {"tenant_id": ID, "kind": STATE, "target": ID, "reason": NOTE,
                    "held_by": ID, "created_at": TIME, "released_at": TIME,
                    "released_by": ID},
    "purged_runs": {"tenant_id": ID, "run_id": ID, "sweep_id": ID, "purged_at": TIME,
                    "events": STATE, "rule": STATE},
    "retention_sweeps": {"sweep_id": ID, "tenant_id": ID, "started_at": TIME, "swept_by": ID,
                         "finished_at": TIME, "purged": STATE, "held": STATE,
                         "skipped": STATE, "blobs_deleted": STATE, "collected_at": TIME,
                         "forgotten": STATE},
    "forgotten_runs": {"tenant_id": ID, "seq": STATE, "run_id": ID, "last_seq": STATE,
                       "head": HASH, "sweep_id": ID, "forgotten_at": TIME, "hash": HASH},
    "budget_usage": {"tenant_id": ID, "since": TIME, "used": STATE},
    "budget_holds": {"tenant_id": ID, "hold_key": ID, "since": TIME, "amounts": STATE},
    "run_labels": {"tenant_id": ID, "run_id": ID, "key": ID, "value": LABEL, "kind": STATE,
                   "sensitive": STATE},
    "span_exports": {"tenant_id": ID, "run_id": ID, "exported_seq": STATE},
    "stream_deltas": {"stream_offset": STATE, "tenant_id": ID, "run_id": ID, "call_key": ID,
                      "step": ID, "call_index": STATE, "attempt": STATE,
                      "delta": SEALED + " (a sealed text)", "written_at": TIME},
    "underway_schema_version": {"version": STATE, "name": ID, "applied_at": TIME},
    "sqlite_sequence": {"name": ID, "seq": STATE},
}


def _unclassified(found: dict[str, list[str]]) -> list[str]:
    return sorted(f"{table}.{column}" for table, columns in found.items() for column in columns
                  if column not in COLUMNS.get(table, {}))


def test_every_sqlite_column_is_classified(sqlite_url: str) -> None:
    connect(sqlite_url).close()
    with sqlite3.connect(sqlite_url.removeprefix("sqlite:///")) as conn:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master "
                                             "WHERE type = 'table'")]
        found = {t: [r[1] for r in conn.execute(f'PRAGMA table_info("{t}")')] for t in tables}
    assert _unclassified(found) == []


@pytest.mark.postgres
def test_every_postgres_column_is_classified(pg_url: str) -> None:
    connect(pg_url).close()
    conninfo, schema = split_url(pg_url)
    with psycopg.connect(conninfo) as conn:
        rows = conn.execute("SELECT table_name, column_name FROM information_schema.columns "
                            "WHERE table_schema = %s", (schema,)).fetchall()
    found: dict[str, list[str]] = {}
    for table, column in rows:
        found.setdefault(table, []).append(column)
    assert _unclassified(found) == []

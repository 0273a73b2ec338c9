"""Intake from a maildir: new mails acted on once and filed in ``cur`` as seen, replies
reaching the run their thread started, attachments taken in or left out with a note,
malformed mails filed in ``.dead`` with the reason without stopping the others, a store
failure leaving the mail in ``new``, and ``underway intake maildir`` watching until
SIGTERM."""

from __future__ import annotations

import base64
import email
import email.policy
import json
import mailbox
import os
from collections.abc import Iterator
from email.message import EmailMessage
from pathlib import Path

import pytest

from fakes.intake_world import (
    TENANT,
    IntakeProcess,
    block_intake,
    open_store,
    routes,
    stored,
    unblock_intake,
)
from underway import Client
from underway.codec import blob_key
from underway.errors import ConfigurationError
from underway.events import canonical_json
from underway.scheduling.intake_sources import REASON_HEADER, MaildirIntake, MailOptions
from underway.store.base import Store


def mail(message_id: str | None, subject: str, *, sender: str = "Ann <ann@example.com>",
         reply_to: str | None = None, attachment: bytes | None = None) -> EmailMessage:
    """A mail; ``reply_to`` is the Message-ID it answers."""
    m = EmailMessage()
    m["From"] = sender
    m["To"] = "desk@example.com"
    m["Subject"] = subject
    m["Date"] = "Tue, 03 Mar 2026 10:00:00 +0100"
    if message_id is not None:
        m["Message-ID"] = message_id
    if reply_to is not None:
        m["In-Reply-To"] = reply_to
        m["References"] = reply_to
    m.set_content(f"{subject}\nsecond line")
    if attachment is not None:
        m.add_attachment(attachment, maintype="application", subtype="pdf",
                         filename="invoice.pdf")
    return m


@pytest.fixture
def maildir(tmp_path: Path) -> mailbox.Maildir:
    return mailbox.Maildir(tmp_path / "inbox", create=True)


@pytest.fixture
def store(sqlite_url: str) -> Iterator[Store]:
    s = open_store(sqlite_url)
    yield s
    s.close()


def files(maildir: mailbox.Maildir, sub: str) -> list[str]:
    return sorted(os.listdir(Path(maildir._path) / sub))


def signals_of(store: Store, run_id: str) -> list[dict[str, object]]:
    return [email_payload(s.payload) for s in store.pending_signals(TENANT, run_id)]


def email_payload(raw: bytes) -> dict[str, object]:
    return dict(json.loads(raw)["payload"])


def test_mails_act_once_and_are_filed_as_seen(store: Store,
                                              maildir: mailbox.Maildir) -> None:
    maildir.add(mail("<q1@example.com>", "Where is my order?", attachment=b"%PDF-1" * 1000))
    maildir.add(mail("<q2@example.com>", "Re: Where is my order?",
                     reply_to="<q1@example.com>"))
    maildir.add(mail("<q1@example.com>", "Where is my order?"))  # delivered twice
    watcher = MaildirIntake(Client(store), routes, Path(maildir._path),
                            MailOptions(tenant_id=TENANT, max_attachment=10_000))
    outcomes = watcher.process_new()

    assert [(o.action, o.key, o.result and o.result.action) for o in outcomes] == [
        ("acted", "q1@example.com", "started"), ("acted", "q2@example.com", "signalled"),
        ("acted", "q1@example.com", "duplicate")]
    assert files(maildir, "new") == []
    assert len(files(maildir, "cur")) == 3 and all(
        name.endswith(":2,S") for name in files(maildir, "cur"))
    run_id = store.entity_owner(TENANT, "q1@example.com")
    assert run_id is not None and outcomes[0].result is not None
    assert run_id == outcomes[0].result.run_id
    [reply] = signals_of(store, run_id)
    assert reply["subject"] == "Re: Where is my order?" and reply["from"] == "ann@example.com"
    assert reply["in_reply_to"] == "q1@example.com"
    assert str(reply["text"]).startswith("Re: Where is my order?\nsecond line")
    # The first mail's attachment is in the run's input, as it was sent, and its journal
    # keeps it once, as a content-addressed blob.
    started = Client(store).state(run_id, tenant_id=TENANT)
    attachment = started.input["attachments"][0]
    assert attachment["filename"] == "invoice.pdf" and attachment["size"] == 6000
    assert base64.b64decode(attachment["content_base64"]) == b"%PDF-1" * 1000
    assert blob_key(canonical_json(attachment["content_base64"])) in store.blob_keys(TENANT)


def test_large_or_skipped_attachments_are_noted(store: Store,
                                                maildir: mailbox.Maildir) -> None:
    maildir.add(mail("<big@example.com>", "big", attachment=b"x" * 2000))
    maildir.add(mail("<skip@example.com>", "skip", sender="bob@example.com",
                     attachment=b"y"))
    big = MaildirIntake(Client(store), routes, Path(maildir._path),
                        MailOptions(tenant_id=TENANT, max_attachment=1000, entity="sender"))
    outcomes = big.process_new()
    assert [o.result and o.result.action for o in outcomes] == ["started", "started"]
    client = Client(store)
    first = client.state(outcomes[0].result.run_id, tenant_id=TENANT)  # type: ignore[union-attr]
    [item] = first.input["attachments"]
    assert item["size"] == 2000 and "content_base64" not in item
    assert "larger than the limit of 1000 bytes" in item["skipped"]
    assert store.entity_owner(TENANT, "bob@example.com") is not None

    maildir.add(mail("<skip2@example.com>", "skip", attachment=b"z"))
    skipping = MaildirIntake(client, routes, Path(maildir._path),
                             MailOptions(tenant_id=TENANT, attachments="skip"))
    [outcome] = skipping.process_new()
    assert outcome.result is not None
    [item] = client.state(outcome.result.run_id, tenant_id=TENANT).input["attachments"]
    assert "not taken in" in item["skipped"] and item["size"] == 1


def test_malformed_mails_go_to_dead_with_the_reason_and_block_nothing(
    store: Store, maildir: mailbox.Maildir
) -> None:
    good_before = maildir.add(mail("<ok1@example.com>", "ok"))
    no_id = maildir.add(mail(None, "no id"))
    no_sender = maildir.add(b"Message-ID: <x@example.com>\nSubject: who?\n\nbody\n")
    good_after = maildir.add(mail("<ok2@example.com>", "ok too"))
    originals = {key: maildir.get_bytes(key) for key in (no_id, no_sender)}
    watcher = MaildirIntake(Client(store), routes, Path(maildir._path),
                            MailOptions(tenant_id=TENANT))
    watcher.process_new()
    no_route = MaildirIntake(Client(store), routes, Path(maildir._path),
                             MailOptions(tenant_id=TENANT, event_type="mail.unrouted"))
    unrouted = maildir.add(mail("<ok3@example.com>", "no route"))
    originals[unrouted] = maildir.get_bytes(unrouted)
    no_route.process_new()

    assert files(maildir, "new") == []
    assert sorted(n.split(":")[0] for n in files(maildir, "cur")) == sorted(
        [good_before, good_after])
    dead = mailbox.Maildir(Path(maildir._path) / ".dead", create=False)
    reasons = {}
    for key in (no_id, no_sender, unrouted):
        raw = dead.get_bytes(key)
        parsed = email.message_from_bytes(raw, policy=email.policy.default)
        reasons[key] = str(parsed[REASON_HEADER])
        # Below the reason, the mail as it came.
        assert raw.split(b"\n", 1)[1] == originals[key]
    assert "no Message-ID header" in reasons[no_id]
    assert "no readable From address" in reasons[no_sender]
    assert "no route for event type 'mail.unrouted'" in reasons[unrouted]
    assert (watcher.counts.acted, watcher.counts.dead) == (2, 2)


def test_a_store_failure_leaves_the_mail_in_new(sqlite_url: str,
                                                maildir: mailbox.Maildir) -> None:
    with stored(sqlite_url) as s:
        key = maildir.add(mail("<m@example.com>", "hello"))
        watcher = MaildirIntake(Client(s), routes, Path(maildir._path),
                                MailOptions(tenant_id=TENANT))
        block_intake(sqlite_url)
        [outcome] = watcher.process_new()
        assert outcome.action == "retry" and files(maildir, "new") == [key]
        unblock_intake(sqlite_url)
        [outcome] = watcher.process_new()
        assert outcome.action == "acted" and files(maildir, "new") == []
        assert not (Path(maildir._path) / ".dead").exists()


def test_not_a_maildir_is_refused(store: Store, tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="is not a maildir: it has no new, cur, tmp"):
        MaildirIntake(Client(store), routes, tmp_path)


def test_the_command_watches_until_sigterm(sqlite_url: str,
                                           maildir: mailbox.Maildir) -> None:
    open_store(sqlite_url).close()
    proc = IntakeProcess("maildir", str(maildir._path), "--db", sqlite_url,
                         "--interval", "0.05")
    try:
        proc.expect_err("ready")
        maildir.add(mail("<w1@example.com>", "hi"))
        proc.expect_err("key 'w1@example.com': started run")
        maildir.add(mail("<w2@example.com>", "again", reply_to="<w1@example.com>"))
        proc.expect_err("key 'w2@example.com': signalled run")
        summary = proc.stop()
    finally:
        proc.close()
    assert "2 acted on (0 duplicates), 0 dead-lettered, 0 handed back" in summary
    assert files(maildir, "new") == [] and len(files(maildir, "cur")) == 2


def test_the_command_once_takes_in_what_is_there(sqlite_url: str,
                                                 maildir: mailbox.Maildir) -> None:
    open_store(sqlite_url).close()
    maildir.add(mail("<o1@example.com>", "one"))
    maildir.add(b"not a mail at all")
    proc = IntakeProcess("maildir", str(maildir._path), "--db", sqlite_url, "--once")
    try:
        assert proc.wait() == 0, proc.stderr()
    finally:
        proc.close()
    assert "1 acted on (0 duplicates), 1 dead-lettered" in proc.out[-1]


def test_the_command_once_says_when_the_store_failed(sqlite_url: str,
                                                     maildir: mailbox.Maildir) -> None:
    open_store(sqlite_url).close()
    key = maildir.add(mail("<f1@example.com>", "one"))
    block_intake(sqlite_url)
    failed = IntakeProcess("maildir", str(maildir._path), "--db", sqlite_url, "--once")
    try:
        assert failed.wait() == 1, failed.stderr()
    finally:
        failed.close()
    assert "0 acted on (0 duplicates), 0 dead-lettered, 1 handed back" in failed.out[-1]
    assert "the store failed" in failed.stderr() and files(maildir, "new") == [key]
    unblock_intake(sqlite_url)
    again = IntakeProcess("maildir", str(maildir._path), "--db", sqlite_url, "--once")
    try:
        assert again.wait() == 0, again.stderr()
    finally:
        again.close()
    assert "1 acted on" in again.out[-1] and files(maildir, "new") == []


def test_the_command_with_the_app_refuses_input_that_does_not_fit(
    sqlite_url: str, maildir: mailbox.Maildir,
) -> None:
    """With --app the flow's input model is checked at the door: the mail goes to the
    dead letters with the reason, and no run is created (as the webhook's 422)."""
    open_store(sqlite_url).close()
    maildir.add(mail("<p1@example.com>", "one"))
    proc = IntakeProcess("maildir", str(maildir._path), "--db", sqlite_url, "--once",
                         "--app", "fakes.intake_world:flows")
    try:
        assert proc.wait() == 0, proc.stderr()
    finally:
        proc.close()
    assert "0 acted on (0 duplicates), 1 dead-lettered" in proc.out[-1]
    assert ("invalid input for flow 'desk': priority: Field required"
            in proc.stderr()), proc.stderr()
    assert "warning" not in proc.stderr()
    with stored(sqlite_url) as store:
        assert store.list_runs(TENANT) == []


def test_the_command_without_the_app_says_what_it_cannot_check(
    sqlite_url: str, maildir: mailbox.Maildir,
) -> None:
    open_store(sqlite_url).close()
    proc = IntakeProcess("maildir", str(maildir._path), "--db", sqlite_url, "--once")
    try:
        assert proc.wait() == 0, proc.stderr()
    finally:
        proc.close()
    assert ("warning: the routes start 'desk', 'order' by name, and no --app gives that "
            "code") in proc.stderr()

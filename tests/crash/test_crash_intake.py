"""Queue and mail intake killed with SIGKILL between receiving a message and settling it,
on SQLite and PostgreSQL, against the real NATS JetStream and RabbitMQ servers and a local
maildir.

A batch of orders (each placed, then changed twice) is taken in by real ``underway intake``
processes. The first is killed at its 4th pass of a fault point, the next at its 3rd, and
a last one takes in the rest. Killed at ``intake.after_commit``, a process has committed
the message's intake and not acknowledged it (not moved the mail to ``cur``): the broker
delivers it again (the mail is still in ``new``) and intake answers ``duplicate``. Killed at
``intake.before_commit``, nothing of the message was written, and the next process acts on
it as new. Either way, afterwards: every key acted on once, one run per entity, each change
signalled once to it, nothing dead-lettered, nothing left with the broker.
"""

from __future__ import annotations

import mailbox
import os
import signal
from collections.abc import Callable, Iterator
from email.message import EmailMessage
from pathlib import Path

import pytest

from fakes.intake_world import (
    TENANT,
    IntakeProcess,
    NatsStream,
    RabbitQueue,
    Sent,
    batch,
    check_once,
    open_store,
    stored,
    wait_until,
)

pytestmark = [pytest.mark.crash, pytest.mark.timeout(600)]

POINTS = ["intake.before_commit", "intake.after_commit"]
KILLS = (4, 3)
"""Each killed process dies at this pass of its fault point."""
BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


@pytest.fixture(params=BACKENDS)
def store_url(request: pytest.FixtureRequest) -> str:
    url = str(request.getfixturevalue("pg_url" if request.param == "postgres"
                                      else "sqlite_url"))
    open_store(url).close()
    return url


def crashed(run: Callable[[dict[str, str]], IntakeProcess], point: str, kill: int) -> None:
    """Run a consumer armed to SIGKILL itself at the ``kill``-th pass of ``point``."""
    proc = run({"UNDERWAY_CRASH_AFTER": str(kill), "UNDERWAY_CRASH_POINTS": point})
    try:
        code = proc.wait()
    finally:
        proc.close()
    assert code == -signal.SIGKILL, f"exit status {code}:\n{proc.stderr()}"


def committed(store_url: str, sent: list[Sent], upto: int) -> list[bool]:
    """Whether each of the first ``upto`` keys has been acted on."""
    with stored(store_url) as s:
        return [s.get_intake(TENANT, m.key) is not None for m in sent[:upto]]


def duplicates(summary: str) -> int:
    """The duplicates a consumer's summary line counts."""
    return int(summary.split("(", 1)[1].split(" ", 1)[0])


def expect_after_kill(store_url: str, sent: list[Sent], point: str, done: int) -> None:
    """After a kill at ``point``, ``done`` messages were settled before it, and the one
    it died on was committed exactly when the kill came after the commit."""
    flags = committed(store_url, sent, done + 1)
    assert all(flags[:done]), flags
    assert flags[done] is (point == "intake.after_commit"), flags


# -- NATS JetStream ----------------------------------------------------------------------
@pytest.fixture
def nats_stream(nats_url: str) -> Iterator[NatsStream]:
    stream = NatsStream(nats_url)
    stream.create()
    yield stream
    stream.delete()


@pytest.mark.parametrize("point", POINTS)
def test_nats_consumer_killed_loses_nothing_and_doubles_nothing(
    store_url: str, nats_stream: NatsStream, point: str
) -> None:
    orders = batch(3)
    # Half the messages carry a Nats-Msg-Id; the others are keyed by their sequence.
    seqs = nats_stream.publish([(key if i % 2 == 0 else None, body)
                                for i, (key, body) in enumerate(orders)])
    sent = [Sent(key if i % 2 == 0 else f"nats:{nats_stream.name}:{seq}",
                 body["entity_id"], body["event_type"].split(".")[1])
            for i, ((key, body), seq) in enumerate(zip(orders, seqs, strict=True))]

    def run(env: dict[str, str] | None = None) -> IntakeProcess:
        return IntakeProcess("nats", "--stream", nats_stream.name, "--subject",
                             nats_stream.subject, "--server", nats_stream.url,
                             "--dead-letter", nats_stream.dead, "--ack-wait", "1",
                             "--db", store_url, env=env)

    done = 0
    for kill in KILLS:
        crashed(run, point, kill)
        done += kill - 1
        expect_after_kill(store_url, sent, point, done)
    last = run()
    try:
        wait_until(nats_stream.settled, "every message to be acknowledged")
        summary = last.stop()
    finally:
        last.close()
    assert duplicates(summary) == (point == "intake.after_commit")
    assert nats_stream.dead_letters() == []
    with stored(store_url) as s:
        check_once(s, sent)


# -- RabbitMQ ------------------------------------------------------------------------------
@pytest.fixture
def rabbit_queue(amqp_url: str) -> Iterator[RabbitQueue]:
    q = RabbitQueue(amqp_url)
    q.create()
    yield q
    q.delete()


@pytest.mark.parametrize("point", POINTS)
def test_rabbitmq_consumer_killed_loses_nothing_and_doubles_nothing(
    store_url: str, rabbit_queue: RabbitQueue, point: str
) -> None:
    orders = batch(3)
    rabbit_queue.publish(list(orders))
    sent = [Sent(key, body["entity_id"], body["event_type"].split(".")[1])
            for key, body in orders]

    def run(env: dict[str, str] | None = None) -> IntakeProcess:
        return IntakeProcess("rabbitmq", "--queue", rabbit_queue.name, "--url",
                             rabbit_queue.url, "--dead-letter", rabbit_queue.dead,
                             "--db", store_url, env=env)

    done = 0
    for kill in KILLS:
        crashed(run, point, kill)
        done += kill - 1
        expect_after_kill(store_url, sent, point, done)
    last = run()
    try:
        wait_until(lambda: all(committed(store_url, sent, len(sent))),
                   "every message to be acted on")
        summary = last.stop()
    finally:
        last.close()
    assert duplicates(summary) == (point == "intake.after_commit")
    # Anything the consumer had not acknowledged would be back in the queue by now.
    assert rabbit_queue.ready() == 0
    assert rabbit_queue.ready(rabbit_queue.dead) == 0
    with stored(store_url) as s:
        check_once(s, sent)


# -- a maildir -------------------------------------------------------------------------------
def thread_mails(entities: int) -> list[tuple[Sent, EmailMessage]]:
    """Per entity a first mail and two replies to it; the thread is the entity."""
    out = []
    for e in range(entities):
        root = f"ord-{e}@example.com"
        for n in range(3):
            m = EmailMessage()
            m["From"] = f"customer{e}@example.com"
            m["Message-ID"] = f"<{'' if n == 0 else f're{n}.'}{root}>"
            if n:
                m["In-Reply-To"] = m["References"] = f"<{root}>"
            m["Subject"] = "order" if n == 0 else f"Re: order ({n})"
            m.set_content(f"message {n}")
            key = str(m["Message-ID"]).strip("<>")
            out.append((Sent(key, root, "placed" if n == 0 else "changed"), m))
    return out


@pytest.mark.parametrize("point", POINTS)
def test_maildir_watcher_killed_loses_nothing_and_doubles_nothing(
    store_url: str, tmp_path: Path, point: str
) -> None:
    box = mailbox.Maildir(tmp_path / "inbox", create=True)
    mails = thread_mails(3)
    for i, (_, m) in enumerate(mails):
        # Maildir names start with the delivery time; name them in order explicitly.
        key = box.add(m)
        os.rename(Path(box._path) / "new" / key, Path(box._path) / "new" / f"{i:03d}.{key}")
    sent = [s for s, _ in mails]

    def run(env: dict[str, str] | None = None) -> IntakeProcess:
        return IntakeProcess("maildir", str(box._path), "--once", "--db", store_url, env=env)

    done = 0
    for kill in KILLS:
        crashed(run, point, kill)
        done += kill - 1
        expect_after_kill(store_url, sent, point, done)
    last = run()
    try:
        assert last.wait() == 0, last.stderr()
    finally:
        last.close()
    summary = last.out[-1]
    assert duplicates(summary) == (point == "intake.after_commit")
    assert os.listdir(Path(box._path) / "new") == []
    assert len(os.listdir(Path(box._path) / "cur")) == len(mails)
    assert not (Path(box._path) / ".dead").exists()
    with stored(store_url) as s:
        check_once(s, sent)


"""The other half of the promise: a legitimate task runs without a person after reading
untrusted content, a person's words are trusted, a rejection is a decision rather than a
failure, and decisions survive a worker restart unchanged. Each runs on SQLite and
PostgreSQL.
"""

from __future__ import annotations

from typing import Any

from provenance_world import (
    ACME_IBAN,
    ATTACKER_IBAN,
    ATTACKER_MAIL,
    DONE,
    INJECTION,
    LOOKUP,
    READ,
    Bench,
    assert_held_for,
    assert_ran_alone,
    pay_to,
    plan,
    say,
    turns,
)

from underway import events as ev
from underway.agent import AgentState
from underway.agent._provenance import blocks_of, corpus_of
from underway.guard.provenance import assess

LEDGER_GOAL = "Pay invoice INV-7 of Acme (1200 EUR) to the account the ledger holds."
NEW_IBAN = "FR7630006000011234567890189"


def test_a_write_whose_arguments_come_from_the_goal_runs_after_untrusted_reads(
    db_url: str,
) -> None:
    bench = Bench(db_url)
    words = INJECTION.split(" to ")[0]  # the e-mail's words, none of its addresses
    mail = say(None, ("send_email", {"to": "billing@acme.example", "subject": "INV-7 paid",
                                     "body": f"Paid. You wrote: {words}"}))
    run_id = bench.run(turns(READ, LOOKUP, pay_to(ACME_IBAN, 1200), mail, DONE))
    assert bench.state(run_id).status == "completed", bench.state(run_id).error
    assert not bench.held(run_id)
    assert bench.world.paid == [{"iban": ACME_IBAN, "amount": 1200.0, "currency": "EUR",
                                 "memo": {}}]
    # The body may carry the e-mail's words; the recipient came from the goal.
    assert [m["to"] for m in bench.world.sent] == ["billing@acme.example"]
    bench.close()


def test_a_body_that_may_carry_the_mails_words_may_not_carry_its_addresses(
    db_url: str,
) -> None:
    bench = Bench(db_url)
    mail = say(None, ("send_email", {"to": "billing@acme.example", "subject": "INV-7 paid",
                                     "body": f"Paid. You wrote: {INJECTION}"}))
    run_id = bench.run(turns(READ, mail, DONE))
    [held] = bench.held(run_id)
    assert held.tool == "send_email" and bench.world.sent == []
    [why] = held.evidence["held_by"]
    assert (why["arg"], why["points_to"], why["sources"]) == (
        "body", [ATTACKER_MAIL], ["read_email"])
    bench.close()


def test_a_write_whose_arguments_a_trusted_lookup_gave_runs_after_untrusted_reads(
    db_url: str,
) -> None:
    bench = Bench(db_url)
    run_id = bench.run(turns(READ, LOOKUP, pay_to(ACME_IBAN, 1200.0), DONE),
                       goal=LEDGER_GOAL)
    assert_ran_alone(bench, run_id, "pay")
    bench.close()


def test_the_attackers_write_in_the_same_run_is_still_held(db_url: str) -> None:
    # The legitimate payment ran; the injected one after it waits for a person.
    bench = Bench(db_url)
    injected = say(None, ("send_email", {"to": ATTACKER_MAIL, "body": "the ledger"}))
    run_id = bench.run(turns(READ, LOOKUP, pay_to(ACME_IBAN), injected))
    assert len(bench.world.paid) == 1
    assert_held_for(bench, run_id, "send_email", "to", "read_email")
    bench.close()


def test_a_persons_answer_is_trusted(db_url: str) -> None:
    bench = Bench(db_url)
    ask = say(None, ("ask_human", {"question": "The mail says the bank changed. Which "
                                               "account do I pay?"}))
    run_id = bench.run(turns(READ, ask, pay_to(NEW_IBAN), DONE), goal=LEDGER_GOAL)
    assert bench.state(run_id).status == "escalated"
    bench.answer(run_id, f"Pay {NEW_IBAN}, I checked it by phone.")
    bench.drive()
    assert_ran_alone(bench, run_id, "pay")
    assert bench.world.paid[0]["iban"] == NEW_IBAN
    bench.close()


def test_a_persons_guidance_after_failures_is_trusted(db_url: str) -> None:
    bench = Bench(db_url)
    missing = say(None, ("lookup_invoice", {"invoice": "INV-404"}))
    run_id = bench.run(turns(READ, missing, missing, pay_to(NEW_IBAN), DONE),
                       goal=LEDGER_GOAL, max_failures=2)
    s = bench.state(run_id)
    assert s.status == "escalated" and "failed 2 actions in a row" in str(
        bench.events(run_id, ev.Escalated)[0])
    bench.answer(run_id, {"pay_to": NEW_IBAN})
    bench.drive()
    assert_ran_alone(bench, run_id, "pay")
    bench.close()


def test_three_rejections_in_a_row_do_not_make_the_agent_ask_how_to_proceed(
    db_url: str,
) -> None:
    bench = Bench(db_url)
    brain = turns(READ, *[pay_to(ATTACKER_IBAN, 95000)] * 3, DONE)
    run_id = bench.run(brain, max_failures=3)
    for n in range(3):
        assert [e.tool for e in bench.held(run_id)] == ["pay"] * (n + 1)
        assert bench.state(run_id).status == "waiting"
        bench.decide(run_id, "reject")
        bench.drive()
    s = bench.state(run_id)
    assert s.status == "completed", (s.status, s.error)
    assert not bench.events(run_id, ev.Escalated)
    assert s.state["failures"] == 0 and bench.world.paid == []
    bench.close()


# -- older journals ----------------------------------------------------------------------

def test_an_agent_state_journaled_before_vouched_holds_the_same_way(db_url: str) -> None:
    # Run a tainted task, then read its state back as an older version journaled it (no
    # `vouched`, `carried`, `requested`): the trusted lookup quoted before the mail stays
    # trusted, the mail does not, and the same calls are held.
    bench = Bench(db_url)
    run_id = bench.run(turns(LOOKUP, READ, pay_to(ATTACKER_IBAN)), goal=LEDGER_GOAL)
    assert_held_for(bench, run_id, "pay", "iban", "read_email")
    now = bench.state(run_id).state
    older = {k: v for k, v in now.items() if k not in ("vouched", "carried", "requested")}
    state = AgentState.model_validate(older)
    assert state.vouched == now["vouched"] == [1]
    tools = {t.name: t for t in bench.tools}
    corpus = corpus_of("", LEDGER_GOAL, {}, state.messages, state.vouched)
    blocks = blocks_of(state.messages, state.vouched, state.carried, state.taint)
    for iban, trusted in ((ATTACKER_IBAN, False), (ACME_IBAN, True)):
        found = assess(tools["pay"], {"iban": iban, "amount": 1200, "currency": "EUR"},
                       corpus, taint=state.taint, requested=state.requested, blocks=blocks)
        assert (not found.held) is trusted
        assert "unrequested" in found.labels  # no plan is known: every write is unrequested
    bench.close()


# -- restarts ----------------------------------------------------------------------------

def _decisions(bench: Bench, run_id: str) -> list[Any]:
    return [(e.tool, e.args, e.rule_id, e.evidence["provenance"], e.evidence["held_by"],
             e.evidence["requested"]) for e in bench.held(run_id)]


def test_provenance_decisions_are_the_same_after_a_worker_restart(db_url: str) -> None:
    script = turns(READ, LOOKUP, say(None, ("wait", {"seconds": 3600, "reason": "settle"})),
                   say(None, ("save_note", {"text": f"new bank {ATTACKER_IBAN}"})),
                   say(None, ("read_note", {})), pay_to(ACME_IBAN), pay_to(ATTACKER_IBAN))
    # Uninterrupted.
    bench = Bench(db_url)
    straight = bench.run(script, name="straight")
    bench.clock.advance(3601)
    bench.drive()
    expected = _decisions(bench, straight)
    assert [d[0] for d in expected] == ["pay"] and expected[0][1]["iban"] == ATTACKER_IBAN
    bench.close()
    # The same task on a worker that dies while the run sleeps: a new engine, new agent
    # objects, the same database.
    first = Bench(db_url, clock=bench.clock)
    restarted = first.run(script, name="restarted")
    assert first.state(restarted).wake_at is not None
    state_before = first.state(restarted).state
    first.close()
    first.clock.advance(3601)
    second = Bench(db_url, first.world, clock=first.clock)
    second.agent(script, name="restarted")
    second.drive()
    assert _decisions(second, restarted) == expected
    after = second.state(restarted).state
    assert after["vouched"][:len(state_before["vouched"])] == state_before["vouched"]
    assert len(second.world.paid) == 1 and second.world.paid[0]["iban"] == ACME_IBAN
    second.close()


def test_a_write_the_plan_did_not_ask_for_waits_even_with_trusted_arguments(
    db_url: str,
) -> None:
    # The plan, made before the mail was read, asked only for the payment. An e-mail to
    # the goal's own address, proposed after the mail, is a call nobody trusted asked for.
    bench = Bench(db_url)
    mail = say(None, ("send_email", {"to": "billing@acme.example", "body": "hello"}))
    run_id = bench.run(turns(READ, mail, planned=plan("pay")))
    (req,) = bench.held(run_id)
    assert (req.tool, req.rule_id) == ("send_email", "unrequested-call")
    assert req.evidence["held_by"] == [] and req.evidence["requested"] is False
    assert bench.world.sent == []
    bench.close()


def test_a_persons_answer_is_trusted_even_when_it_repeats_what_the_run_wrote(
    db_url: str,
) -> None:
    # The run noted the mail's account (untrusted), then asked; the person confirms that
    # very account. Their words are trusted as given: the payment runs.
    bench = Bench(db_url)
    note = say(None, ("save_note", {"text": ATTACKER_IBAN}))
    ask = say(None, ("ask_human", {"question": f"Is {ATTACKER_IBAN} Acme's new account?"}))
    run_id = bench.run(turns(READ, note, ask, pay_to(ATTACKER_IBAN), DONE), goal=LEDGER_GOAL)
    bench.answer(run_id, f"Yes, pay {ATTACKER_IBAN}; I confirmed it by phone.")
    bench.drive()
    assert_ran_alone(bench, run_id, "pay")
    bench.close()

"""The collections playbook: policy notes the agent can recall while it works.

The notes live in the knowledge base ``<data>/knowledge.db`` (apart from any run's
journal); :func:`seed` writes them once, and the agent reads them with underway's
``recall`` tool.
"""

from __future__ import annotations

import time
from pathlib import Path

from underway import Tool
from underway.knowledge import KnowledgeBase, KnowledgeRecord, open_knowledge, recall_tool

TENANT = "default"
NOTES = {
    "playbook-reminders": (
        "Reminders: at most three per invoice, three days apart, always polite and factual. "
        "Never threaten legal action, never pressure. After the third, hand the invoice to "
        "the collections team."
    ),
    "playbook-disputes": (
        "Disputes: when a customer disputes part of an invoice for goods damaged in transit "
        "and a return note confirms it, route the dispute to the disputes team and write off "
        "the disputed amount. Finance approves write-offs above 5,000 INR."
    ),
    "playbook-overpayments": (
        "Overpayments: refund what a customer paid above the balance promptly. Refunds up "
        "to 5,000 INR need no approval; larger ones need finance."
    ),
}


def open_playbook(data: Path) -> KnowledgeBase:
    """The knowledge base that holds the playbook (created if missing)."""
    return open_knowledge(f"sqlite:///{data.resolve() / 'knowledge.db'}")


def seed(data: Path) -> None:
    """Write the playbook's notes (again: replaces them)."""
    knowledge = open_playbook(data)
    try:
        for note_id, text in NOTES.items():
            knowledge.put(KnowledgeRecord(id=note_id, tenant_id=TENANT, text=text,
                                          source="collections-playbook-v3",
                                          created_at=time.time()))
    finally:
        knowledge.close()


def recall(data: Path) -> Tool:
    """The agent's ``recall`` tool over the playbook."""
    return recall_tool(open_playbook(data))

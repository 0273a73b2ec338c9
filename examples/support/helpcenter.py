"""The help center: a few articles kept in underway's knowledge base, which the agent
searches with the ``search_help_center`` tool (a :func:`~underway.knowledge.recall_tool`)."""

from __future__ import annotations

from underway.knowledge import KnowledgeBase, KnowledgeRecord

TENANT = "default"

ARTICLES: dict[str, tuple[str, str]] = {
    "kb-tracking": (
        "Tracking a delivery",
        "Parcels are tracked from the moment they leave our warehouse. If tracking has not "
        "changed for three days or more, we open a trace with the carrier and send you an "
        "update within two working days; a parcel lost in transit is sent again at no cost.",
    ),
    "kb-lost-package": (
        "A package that never arrived",
        "If your package has not arrived two weeks after dispatch, we treat it as lost: we "
        "ship a replacement or refund the order, whichever you prefer. We need the order "
        "number to find the shipment.",
    ),
    "kb-account-locked": (
        "Account locked after a failed payment",
        "After two failed card payments an account is locked for your protection. Our team "
        "unlocks it once the card issuer confirms the payment attempt; you will get an e-mail "
        "with a link to sign in again and to update your card.",
    ),
    "kb-double-charge": (
        "Charged twice for one order",
        "A double charge is usually a pending authorisation that disappears within five "
        "working days. If both charges are still there after that, our billing team refunds "
        "the duplicate; refunds are only ever issued by the billing team.",
    ),
    "kb-exchange": (
        "Exchanging an item",
        "Items can be exchanged within 30 days. Start the exchange from your order page; we "
        "send a prepaid return label and ship the new size as soon as the return is scanned.",
    ),
}
"""Article id -> (title, text)."""


def seed(knowledge: KnowledgeBase, *, now: float) -> int:
    """Put every article into the knowledge base (again: ids are fixed, so seeding twice
    leaves one copy of each); return how many there are."""
    for article_id, (title, text) in ARTICLES.items():
        knowledge.put(KnowledgeRecord(
            id=article_id, tenant_id=TENANT, text=f"{title}. {text}",
            source=f"helpcenter:{article_id}", created_at=now, sensitivity="public",
        ))
    return len(ARTICLES)

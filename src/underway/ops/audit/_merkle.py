"""A Merkle tree over the anchored heads, as in RFC 6962 (certificate transparency).

Leaves and inner nodes are hashed with different prefixes, so a leaf can never pass for a
node. The root commits to every leaf in order; an inclusion proof shows that one leaf is
in a tree of a given root with ``log2(n)`` hashes, so a root published anywhere (a
transparency log, a ticket, an email) is enough to prove the head of any one run.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from ...events import canonical_json

Leaf = tuple[str, str, int, str]
"""(tenant, run, seq, head hash) of one run's journal."""


def leaf_hash(leaf: Leaf) -> bytes:
    """The hash of one leaf: ``sha256(0x00 || canonical JSON of the leaf)``."""
    return hashlib.sha256(b"\x00" + canonical_json(list(leaf))).digest()


def _node(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def _split(n: int) -> int:
    """The largest power of two smaller than ``n`` (n > 1)."""
    k = 1
    while k * 2 < n:
        k *= 2
    return k


def _root(hashes: Sequence[bytes]) -> bytes:
    if not hashes:
        return hashlib.sha256(b"").digest()
    if len(hashes) == 1:
        return hashes[0]
    k = _split(len(hashes))
    return _node(_root(hashes[:k]), _root(hashes[k:]))


def merkle_root(leaves: Sequence[Leaf]) -> str:
    """The hex root of the tree over ``leaves`` in the order given."""
    return _root([leaf_hash(leaf) for leaf in leaves]).hex()


def inclusion_proof(leaves: Sequence[Leaf], index: int) -> list[str]:
    """The sibling hashes (hex, from the leaf up) proving ``leaves[index]`` is in the tree."""
    if not 0 <= index < len(leaves):
        raise IndexError(f"leaf {index} is not in a tree of {len(leaves)}")
    hashes = [leaf_hash(leaf) for leaf in leaves]
    path: list[str] = []
    while len(hashes) > 1:
        k = _split(len(hashes))
        if index < k:
            path.append(_root(hashes[k:]).hex())
            hashes = hashes[:k]
        else:
            path.append(_root(hashes[:k]).hex())
            hashes, index = hashes[k:], index - k
    return path[::-1]


def verify_inclusion(leaf: Leaf, index: int, size: int, proof: Sequence[str], root: str) -> bool:
    """Whether ``proof`` shows ``leaf`` at ``index`` of a tree with ``root``.

    Args:
        leaf: The leaf.
        index: Its index.
        size: The tree's number of leaves.
        proof: The inclusion proof's hashes.
        root: The tree's root.
    """
    if not 0 <= index < size:
        return False
    # The path from the root down: at each level, which side the leaf is on.
    sides: list[bool] = []
    lo, n = index, size
    while n > 1:
        k = _split(n)
        if lo < k:
            sides.append(True)
            n = k
        else:
            sides.append(False)
            lo, n = lo - k, n - k
    if len(sides) != len(proof):
        return False
    try:
        siblings = [bytes.fromhex(p) for p in proof]
    except ValueError:
        return False
    h = leaf_hash(leaf)
    for leaf_is_left, sibling in zip(reversed(sides), siblings, strict=True):
        h = _node(h, sibling) if leaf_is_left else _node(sibling, h)
    return h.hex() == root

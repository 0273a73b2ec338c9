"""The Merkle tree of anchored heads: every leaf of every tree size proves its inclusion,
and nothing else does."""

from __future__ import annotations

from underway.ops.audit import inclusion_proof, merkle_root, verify_inclusion


def leaves(n: int) -> list[tuple[str, str, int, str]]:
    return [("t", f"r-{i:03}", i + 1, f"{i:064x}") for i in range(n)]


def test_every_leaf_of_every_size_proves_its_inclusion() -> None:
    for n in range(1, 34):
        tree = leaves(n)
        root = merkle_root(tree)
        for i, leaf in enumerate(tree):
            proof = inclusion_proof(tree, i)
            assert verify_inclusion(leaf, i, n, proof, root), (n, i)
            assert not verify_inclusion(("t", leaf[1], leaf[2] + 1, leaf[3]), i, n, proof, root)
            if n > 1:
                assert not verify_inclusion(leaf, (i + 1) % n, n, proof, root)
                assert not verify_inclusion(leaf, i, n, proof[:-1], root)


def test_the_root_commits_to_every_leaf_and_its_order() -> None:
    tree = leaves(5)
    root = merkle_root(tree)
    assert merkle_root(tree[::-1]) != root
    assert merkle_root(tree[:4]) != root
    assert merkle_root([*tree[:4], ("t", "r-004", 6, tree[4][3])]) != root
    # A leaf cannot pass for an inner node (RFC 6962 domain separation).
    assert merkle_root([]) != merkle_root(leaves(1))

"""How the provenance corpus scales with the size of trusted and untrusted content.

``python bench/provenance_corpus.py`` prints, for trusted tool outputs of growing size, the
time to add one to a :class:`~underway.guard.provenance.Corpus`, to look up values in it,
and to mark an answer against an untrusted block of the same size. Each figure is the
median of five runs; the ratio of a size to half of it is about 2 when the work is linear.
It is a measurement to read, not a test: nothing here asserts a time.
"""

from __future__ import annotations

import json
import random
import statistics
import string
import time
from collections.abc import Callable
from typing import Any

from underway.guard.provenance import _POINTER, Corpus, _spanned, mark_answer


def _word(rng: random.Random) -> str:
    return "".join(rng.choice(string.ascii_letters) for _ in range(rng.randint(2, 10)))


def _records(n: int, rng: random.Random) -> list[dict[str, Any]]:
    return [{"id": i, "name": f"{_word(rng)} {_word(rng)}",
             "iban": f"DE{rng.randint(10**19, 10**20)}",
             "note": " ".join(_word(rng) for _ in range(30)),
             "amount": rng.randint(1, 10**6)} for i in range(n)]


def _median(fn: Callable[[], object], repeat: int = 5) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def measure(sizes: tuple[int, ...] = (2_500, 5_000, 10_000, 20_000)) -> list[dict[str, Any]]:
    """One row per size: megabytes, and seconds to add, to derive and to mark an answer."""
    rng = random.Random(7)
    rows: list[dict[str, Any]] = []
    for n in sizes:
        records = _records(n, rng)
        blob = json.dumps(records)
        corpus = Corpus()
        corpus.add(records)
        probes = ["GB33BUKB20201555555555", records[n // 2]["iban"], records[3]["name"],
                  95_000, "ops@evil.example", records[7]["note"][:40]]
        answer = " ".join(_word(rng) for _ in range(3_000))
        block = [("read_email", blob.lower())]

        def add(records: list[dict[str, Any]] = records) -> None:
            Corpus().add(records)

        def derive(corpus: Corpus = corpus, probes: list[Any] = probes) -> None:
            for p in probes:
                corpus.derives(p)

        def mark(answer: str = answer, block: list[tuple[str, str]] = block) -> None:
            mark_answer({"result": answer}, Corpus(), taint=["read_email"], blocks=block)

        rows.append({"records": n, "mb": round(len(blob) / 1e6, 2), "add_s": _median(add),
                     "derive_6_s": _median(derive), "mark_s": _median(mark, 3)})
    return rows


def pathological(sizes: tuple[int, ...] = (20_000, 200_000, 2_000_000)) -> list[dict[str, Any]]:
    """Inputs that cost the square of their length before they were fixed: a long run of
    word characters with no ``@`` in a content argument (the address search), and a value
    found at every place of a long run of punctuation in trusted text (the span check)."""
    rows: list[dict[str, Any]] = []
    for n in sizes:
        run = "a" * n
        dots = " " + "." * n + "x"

        def pointers(run: str = run) -> None:
            list(_POINTER.finditer(run))

        def spans(dots: str = dots) -> None:
            _spanned("....", dots)

        rows.append({"chars": n, "pointers_s": _median(pointers, 3),
                     "spans_s": _median(spans, 3)})
    return rows


def main() -> None:
    for r in pathological():
        print(f"{r['chars']:>9} chars: address search {r['pointers_s']:.3f} s, "
              f"span check on punctuation {r['spans_s']:.3f} s")
    rows = measure()
    print(f"{'records':>8} {'MB':>6} {'add s':>8} {'x':>5} {'6 derives s':>12} "
          f"{'mark s':>8} {'x':>5}")
    prev: dict[str, Any] | None = None
    for r in rows:
        ra = f"{r['add_s'] / prev['add_s']:.1f}" if prev else "-"
        rm = f"{r['mark_s'] / prev['mark_s']:.1f}" if prev else "-"
        print(f"{r['records']:>8} {r['mb']:>6} {r['add_s']:>8.3f} {ra:>5} "
              f"{r['derive_6_s']:>12.4f} {r['mark_s']:>8.3f} {rm:>5}")
        prev = r


if __name__ == "__main__":
    main()

"""The little statistics the figures need: percentiles of a sample, and the tests that tell a
shift from noise (two proportions, two means, two distributions), with the normal
distribution of the standard library."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from statistics import NormalDist, fmean, variance

_NORMAL = NormalDist()


@dataclass(frozen=True, slots=True)
class Spread:
    """A sample summarised: how many values, their mean, median (``p50``), 90th
    percentile (``p90``) and largest; all 0 for an empty sample."""

    n: int = 0
    mean: float = 0.0
    p50: float = 0.0
    p90: float = 0.0
    max: float = 0.0

    @classmethod
    def of(cls, values: Iterable[float]) -> Spread:
        """The spread of ``values`` (percentiles interpolated between order statistics)."""
        ordered = sorted(values)
        if not ordered:
            return cls()
        return cls(len(ordered), fmean(ordered), percentile(ordered, 0.5),
                   percentile(ordered, 0.9), ordered[-1])


def percentile(ordered: list[float], q: float) -> float:
    """The ``q`` quantile (0..1) of the sorted, non-empty list ``ordered``, interpolated
    linearly between the two nearest values."""
    pos = (len(ordered) - 1) * q
    low = math.floor(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def ratio(part: float, whole: float) -> float:
    """``part / whole``, 0 when ``whole`` is 0."""
    return part / whole if whole else 0.0


def two_proportions(x1: int, n1: int, x2: int, n2: int) -> float:
    """The two-sided p-value of a z-test that ``x1/n1`` and ``x2/n2`` are one rate (1 when
    either sample is empty or neither varies)."""
    if not n1 or not n2:
        return 1.0
    pooled = (x1 + x2) / (n1 + n2)
    se = math.sqrt(pooled * (1 - pooled) * (1 / n1 + 1 / n2))
    if se == 0:
        return 1.0
    z = abs(x2 / n2 - x1 / n1) / se
    return 2 * (1 - _NORMAL.cdf(z))


def two_means(a: list[float], b: list[float]) -> float:
    """The two-sided p-value of Welch's test that samples ``a`` and ``b`` have one mean,
    with the normal approximation of its t statistic (the samples it is used on are
    guarded to be large); 1 when either has fewer than two values."""
    if len(a) < 2 or len(b) < 2:
        return 1.0
    se = math.sqrt(variance(a) / len(a) + variance(b) / len(b))
    if se == 0:
        return 1.0 if fmean(a) == fmean(b) else 0.0
    return 2 * (1 - _NORMAL.cdf(abs(fmean(b) - fmean(a)) / se))


def total_variation(p: Mapping[str, int], q: Mapping[str, int]) -> float:
    """The total variation distance between the distributions that counts ``p`` and ``q``
    make: half the sum of the differences of their shares (0 alike, 1 disjoint)."""
    np_, nq = sum(p.values()), sum(q.values())
    if not np_ or not nq:
        return 0.0
    return 0.5 * sum(abs(p.get(k, 0) / np_ - q.get(k, 0) / nq) for k in {*p, *q})


def two_distributions(p: Mapping[str, int], q: Mapping[str, int]) -> float:
    """The p-value of a chi-square test that counts ``p`` and ``q`` come from one
    distribution over their categories (Wilson-Hilferty's normal approximation of the
    chi-square distribution); 1 when either is empty or there is one category."""
    np_, nq = sum(p.values()), sum(q.values())
    keys = sorted({*p, *q})
    if not np_ or not nq or len(keys) < 2:
        return 1.0
    total = np_ + nq
    stat = 0.0
    for k in keys:
        both = p.get(k, 0) + q.get(k, 0)
        for count, n in ((p.get(k, 0), np_), (q.get(k, 0), nq)):
            expected = both * n / total
            stat += (count - expected) ** 2 / expected
    df = len(keys) - 1
    z = ((stat / df) ** (1 / 3) - (1 - 2 / (9 * df))) / math.sqrt(2 / (9 * df))
    return 1 - _NORMAL.cdf(z)

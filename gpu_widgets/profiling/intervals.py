"""Sets of time intervals (sorted, disjoint (start, end) pairs): union, clip, subtract, total."""
from __future__ import annotations

from collections.abc import Iterable

Spans = list[tuple[float, float]]


def union(spans: Iterable[tuple[float, float]]) -> Spans:
    out: Spans = []
    for a, b in sorted(s for s in spans if s[1] > s[0]):
        if out and a <= out[-1][1]:
            if b > out[-1][1]:
                out[-1] = (out[-1][0], b)
        else:
            out.append((a, b))
    return out


def intersect(x: Spans, y: Spans) -> Spans:
    out: Spans = []
    i = j = 0
    while i < len(x) and j < len(y):
        a, b = max(x[i][0], y[j][0]), min(x[i][1], y[j][1])
        if a < b:
            out.append((a, b))
        if x[i][1] < y[j][1]:
            i += 1
        else:
            j += 1
    return out


def subtract(x: Spans, y: Spans) -> Spans:
    out: Spans = []
    j = 0
    for a, b in x:
        while j < len(y) and y[j][1] <= a:
            j += 1
        k, start = j, a
        while k < len(y) and y[k][0] < b:
            if y[k][0] > start:
                out.append((start, y[k][0]))
            start = max(start, y[k][1])
            k += 1
        if start < b:
            out.append((start, b))
    return out


def total(spans: Spans) -> float:
    return sum(b - a for a, b in spans)

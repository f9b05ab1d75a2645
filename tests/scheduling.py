"""The order modules run in: the heaviest first.

Under pytest-xdist's ``loadscope`` (make test) each module goes whole to the next free worker, in
collection order (with ``--no-loadscope-reorder``: xdist's own order, most tests first, sent the
one-test modules of a minute last); a long module sent last runs alone at the end while the other
workers idle. Modules with a test marked ``slow`` (tens of seconds) go first,
then those with the most ``integration`` tests (a server, kernel or process each), then the unit
tests, which fill the gaps. The order within a module is kept; tests never depend on it.
"""
from __future__ import annotations

from collections import defaultdict

import pytest


def heavy_first(items: list[pytest.Item]) -> None:
    slow: set[str] = set()
    integration: dict[str, int] = defaultdict(int)
    first_seen: dict[str, int] = {}
    for i, item in enumerate(items):
        module = item.nodeid.split("::", 1)[0]
        first_seen.setdefault(module, i)
        if item.get_closest_marker("slow"):
            slow.add(module)
        integration[module] += bool(item.get_closest_marker("integration"))

    def key(item: pytest.Item) -> tuple[bool, int, int]:
        module = item.nodeid.split("::", 1)[0]
        return module not in slow, -integration[module], first_seen[module]

    items.sort(key=key)

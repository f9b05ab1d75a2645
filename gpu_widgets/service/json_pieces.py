"""JSON of a big answer made one list item at a time, in worker threads, the GIL handed back often.

``json.dumps`` of a megabyte is one C call that holds the GIL throughout (~20 ms, more on a busy
machine): the server's event loop, which needs the GIL after each socket call, waits all that
time. Made item by item, with ``time.sleep(0)`` once the worker held it ``YIELD_EVERY_S``, the
loop waits at most about that long. Each item's objects (kernel attribution, redaction) can
also be made just before it is encoded, so they die young instead of filling the heap that the
garbage collector's full passes walk. The text is what ``json.dumps`` gives for the whole.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from json import dumps
from typing import Any

YIELD_EVERY_S = 0.002  # as samples.py and the Prometheus render


def object_with_list(obj: Mapping[str, Any], key: str, items: Iterable[Any],
                     shape: Callable[[Any], Any] | None = None) -> str:
    """``json.dumps({**obj, key: [shape(i) for i in items]}, allow_nan=False)``, made in pieces:
    ``obj``'s other keys keep their order, ``key`` where ``obj`` has it (else last)."""
    parts: list[str] = []
    held = time.perf_counter()
    for name, value in ({**obj, key: None}).items():
        if name != key:
            parts.append(f"{dumps(name)}: {dumps(value, allow_nan=False)}")
            continue
        encoded = []
        for item in items:
            encoded.append(dumps(item if shape is None else shape(item), allow_nan=False))
            if time.perf_counter() - held > YIELD_EVERY_S:
                time.sleep(0)  # lets a waiting event loop take the GIL now, not at the switch interval
                held = time.perf_counter()
        parts.append(f"{dumps(name)}: [{', '.join(encoded)}]")
    return "{" + ", ".join(parts) + "}"

"""On a very large machine, the Jupyter server's start-up heap is frozen out of full garbage collections.

CPython's full collection walks every tracked object: in a Jupyter server watching 64 GPUs x
1000 processes that is ~280 000 (the server's modules, classes and their data, then the process
dicts), a 100-600 ms pause that holds the GIL, so the event loop, and every request, waits. It runs
each time the objects that survived two young collections reach a quarter of that heap; the
answers of a big machine (64 000 processes, 3700 series a scrape) make that every 5-10 s.
``gc.freeze()`` (CPython's own remedy, see its documentation) moves what exists now to a
permanent generation that later full passes skip: they then walk only what came after.

Done once per process, when a sample first shows ``BIG_MACHINE_PROCESSES`` GPU processes in all
(small machines never pay the one-time collection below), and only while
``GpuWidgets.freeze_gc_on_big_machines`` is on. Frozen objects are still freed when their last
reference goes; only a reference cycle among them would stay (a ``gc.collect()`` right before
clears those already unreachable, so what is frozen is the live heap).
"""
from __future__ import annotations

import gc
import logging
import threading
from collections.abc import Mapping
from typing import Any

BIG_MACHINE_PROCESSES = 1024
_lock = threading.Lock()
_frozen = False


def freeze_once_big(snapshot: Mapping[str, Any], log: logging.Logger | None = None) -> bool:
    """Freeze the heap if ``snapshot`` is a big machine's and this process has not yet; True if it did."""
    global _frozen
    if _frozen:
        return False
    count = 0
    for dev in snapshot["devices"]:
        count += len(dev.get("processes") or ())
    if count < BIG_MACHINE_PROCESSES:
        return False
    with _lock:
        if _frozen:
            return False
        _frozen = True
        gc.collect()  # once: what is unreachable now is not frozen for ever
        gc.freeze()
    if log is not None:
        log.info("gpu-widgets: %d GPU processes: froze %d start-up objects out of full garbage collections "
                 "(GpuWidgets.freeze_gc_on_big_machines)", count, gc.get_freeze_count())
    return True

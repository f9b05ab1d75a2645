"""Answers made once per sample in a worker thread and shared by every request that asks for the same.

Five sidebars polling a 64-GPU server ask for ``samples/latest`` (and the first ``processes``
page) within the same few milliseconds of each sample; each made its megabyte of JSON again, in
as many worker threads, all wanting the GIL the event loop needs. Used on the event loop only
(no lock): the first request of a key starts the work, the others await the same future.
"""
from __future__ import annotations

import asyncio
from collections.abc import Callable, Hashable
from typing import Any

KEPT = 8  # answers kept for the current sample (distinct pages, users)


class PerSample:
    def __init__(self, kept: int = KEPT) -> None:
        self.kept = kept
        self._sample: object = None
        self._answers: dict[Hashable, asyncio.Future[Any]] = {}
        self.made = 0  # answers started so far (tests check that requests share them)

    async def get(self, sample: object, key: Hashable, make: Callable[..., Any], *args: Any) -> Any:
        """``make(*args)`` in the loop's default executor, once per ``sample`` (compared by identity) and ``key``."""
        if sample is not self._sample:
            self._sample, self._answers = sample, {}
        future = self._answers.get(key)
        if future is None or future.done() and (future.cancelled() or future.exception() is not None):
            if len(self._answers) >= self.kept:
                self._answers.clear()
            future = self._answers[key] = asyncio.get_running_loop().run_in_executor(None, make, *args)
            self.made += 1
        # Shielded: a client that goes away must not cancel what the others wait for.
        return await asyncio.shield(future)

"""The alert engine: one evaluation per sample for every browser tab, and the answers they poll.

``on_sample`` is a sampler subscriber: it runs on the sampler thread after each tick, applies the
rules to the snapshot (no NVML call, no /proc walk) and updates the episodes. Which GPU process
belongs to which of this server's kernels comes from ``set_kernels``, which the server calls
every few seconds from its own attribution (gpu_widgets/server/alerts_feed.py).

Readers get one JSON text per change of the episodes (``body``), tagged with the version that
made it, so a hundred tabs polling cost one ``json.dumps`` per change and a 304 otherwise.
"""
from __future__ import annotations

import json
import secrets
import threading
from collections.abc import Mapping
from typing import Any

from .episodes import CLEAR_HOLD_S, KEEP_S, MAX_ENDED, EpisodeBook
from .rules import GpuState, KernelRef, Thresholds, evaluate


class AlertEngine:
    def __init__(self, limits: Thresholds | None = None, enabled: bool = True, problem: str | None = None,
                 clear_hold_s: float = CLEAR_HOLD_S, keep_s: float = KEEP_S, max_ended: int = MAX_ENDED) -> None:
        self.limits = limits or Thresholds()
        self.enabled = enabled and problem is None
        self.problem = problem  # a bad setting, in words: the alerts are off until it is fixed
        self.book = EpisodeBook(clear_hold_s, keep_s, max_ended)
        self._states: dict[int, GpuState] = {}
        self._owners: Mapping[int, KernelRef] = {}
        self._live: frozenset[str] = frozenset()
        # Told apart from another server run's versions in ETags (a restart starts again at 0).
        self.run_id = secrets.token_hex(4)
        self._body: tuple[int, int, str] = (-1, -1, "")  # (episodes' version, settings', JSON)
        self._settings_version = 0
        self._body_lock = threading.Lock()
        self.evaluations = 0

    # -- fed by the server ---------------------------------------------------------------------
    def set_kernels(self, owners: Mapping[int, KernelRef], live: frozenset[str]) -> None:
        """pid of a GPU process -> its kernel; ``live``: the ids of the server's running kernels."""
        self._owners, self._live = dict(owners), frozenset(live)

    def set_limits(self, limits: Thresholds) -> None:
        """New thresholds (the settings endpoint; on the event loop). The next tick applies them;
        the answers and their ETag change now, so every tab sees the settings that apply."""
        self.limits = limits
        self._settings_version += 1

    def on_sample(self, snapshot: Mapping[str, Any]) -> None:
        """Evaluate one snapshot (a sampler subscriber; the sampler counts what it raises)."""
        if not self.enabled:
            return
        owners = self._owners
        gpus = self._mine() if self.limits.gpus == "mine" else None
        conditions = evaluate(snapshot, self.limits, self._states, owners, gpus)
        self.book.update(float(snapshot["timestamp"]), conditions)
        self.evaluations += 1

    def _mine(self) -> list[int]:
        """GPUs on which a process of one of this server's running kernels was last seen (a lost
        GPU keeps them: its process list is unknown, and its loss concerns them)."""
        live = self._live
        return [index for index, state in self._states.items() if state.kernels & live]

    # -- read by the handler -------------------------------------------------------------------
    @property
    def version(self) -> int:
        return self.book.published[0]

    def episodes(self, since: float | None = None) -> list[dict[str, Any]]:
        """Open episodes and those ended lately, newest first; with ``since``, only those that
        started, changed or ended after it (a poll's increment)."""
        return self.answer(since)["episodes"]

    def settings(self) -> dict[str, Any]:
        limits = self.limits
        return {
            "temperature_margin_c": limits.temperature_margin_c, "throttle_s": limits.throttle_s,
            "memory_percent": limits.memory_percent, "idle_kernel_memory_gib": limits.idle_kernel_memory_gib,
            "idle_minutes": limits.idle_minutes, "gpus": limits.gpus,
        }

    def answer(self, since: float | None = None) -> dict[str, Any]:
        version, episodes = self.book.published  # one read: the version and its episodes agree
        chosen = list(episodes) if since is None else [e for e in episodes if e["updated"] > since]
        return {"enabled": self.enabled, "problem": self.problem, "version": version,
                "settings": self.settings(), "episodes": chosen}

    def body(self) -> tuple[int, str]:
        """(version, the JSON of ``answer()``), made once per version and shared by every poller.
        The JSON is left open (no closing brace) so the handler can add the time of answering."""
        version, settings, text = self._body
        if version == self.version and settings == self._settings_version:
            return version, text
        with self._body_lock:
            settings = self._settings_version
            answer = self.answer()
            if self._body[:2] != (answer["version"], settings):
                self._body = (answer["version"], settings, json.dumps(answer, allow_nan=False)[:-1])
            return self._body[0], self._body[2]

    def etag(self, version: int) -> str:
        """The tag of ``version`` under the settings in force (both are in the answer)."""
        return f'W/"alerts-{self.run_id}-{version}.{self._settings_version}"'

"""Episodes: a condition from its start to its end, each told once, kept a while after it ends.

An episode opens on the first ACTIVE report of a condition and keeps its start and its id for its
whole life. It ends when the condition has been clear for ``clear_hold_s`` seconds (a reading
that dips out for a tick does not end it); its end is the moment it first cleared. Ended episodes
stay ``keep_s`` seconds, at most ``max_ended`` of them, so memory is bounded however long the
server runs and however often a GPU misbehaves.
"""
from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from .rules import ACTIVE, SEVERITY, Condition
from .words import clock, duration

CLEAR_HOLD_S = 3.0
KEEP_S = 3600.0
MAX_ENDED = 200
NO_KERNEL = {"kernel_id": None, "notebook_path": None, "pid": None, "memory_bytes": None}


@dataclass
class Episode:
    id: str
    condition: Condition
    start: float
    updated: float
    end: float | None = None
    clear_since: float | None = None

    def public(self) -> dict[str, Any]:
        c = self.condition
        when = f"since {clock(self.start)}" if self.end is None else (
            f"from {clock(self.start)} to {clock(self.end)} ({duration(self.end - self.start)})")
        return {
            "id": self.id, "kind": c.kind, "severity": SEVERITY[c.kind], "gpu": c.gpu, "uuid": c.uuid,
            "start": self.start, "end": self.end, "updated": self.updated, "message": f"{c.what}; {when}",
            **(c.kernel or NO_KERNEL),
        }


class EpisodeBook:
    """Open and recently ended episodes. ``update`` runs on one thread (the sampler's); readers
    take ``published``, one tuple replaced whole on each change, so they need no lock."""

    def __init__(self, clear_hold_s: float = CLEAR_HOLD_S, keep_s: float = KEEP_S, max_ended: int = MAX_ENDED) -> None:
        self.clear_hold_s = clear_hold_s
        self.keep_s = keep_s
        self._open: dict[tuple[Any, ...], Episode] = {}
        self._ended: deque[dict[str, Any]] = deque(maxlen=max_ended)
        # (version, episodes newest first): version counts the changes since the server started.
        self.published: tuple[int, tuple[dict[str, Any], ...]] = (0, ())

    def update(self, now: float, conditions: Iterable[Condition]) -> bool:
        """Apply one tick's conditions; True when an episode opened or ended."""
        changed = False
        seen = set()
        for c in conditions:
            seen.add(c.key)
            episode = self._open.get(c.key)
            if episode is not None:
                episode.clear_since = None
            elif c.level == ACTIVE:
                self._open[c.key] = Episode(_episode_id(c), c, c.since, now)
                changed = True
        for key, episode in list(self._open.items()):
            if key in seen:
                continue
            if episode.clear_since is None:
                episode.clear_since = now
            if now - episode.clear_since >= self.clear_hold_s:
                episode.end, episode.updated = episode.clear_since, now
                del self._open[key]
                self._ended.append(episode.public())
                changed = True
        while self._ended and self._ended[0]["end"] < now - self.keep_s:
            self._ended.popleft()
            changed = True
        if changed:
            episodes = [e.public() for e in self._open.values()] + list(self._ended)
            episodes.sort(key=lambda e: (e["start"], e["id"]), reverse=True)
            self.published = (self.published[0] + 1, tuple(episodes))
        return changed

    @property
    def open_count(self) -> int:
        return len(self._open)


def _episode_id(c: Condition) -> str:
    """Readable and unique: one episode of a condition at a time, and starts are milliseconds."""
    parts = [c.kind, str(c.gpu), *(str(k) for k in c.key[2:]), str(int(c.since * 1000))]
    return "/".join(parts)

"""A rank's run in its launch: under torch.distributed every rank records, each into
``<launch>/rank-<r>/`` of the one launch directory the ranks agree on (parallel/rendezvous.py),
and rank 0 keeps the launch's own run.json (its status, end and the hosts seen). Rank 0 alone
displays; any other rank shows nothing and prints one line saying where it records.

The rank is read when a run starts (a monitor made before ``init_process_group`` still finds
it); the directory is agreed on the monitor's thread, so the loop never waits for rank 0.
A single-process run (``rank_env()`` None) goes through none of this.
"""
from __future__ import annotations

import itertools
import sys
import time
from typing import Any

from ..parallel.env import RankEnv, rank_env
from ..parallel.rendezvous import agree
from ..runs.launch_dir import launch_meta, rank_hosts, write_launch_meta
from ..runs.run_log import RunLog

HOSTS_EVERY_S = 5.0  # rank 0 looks for the hosts of ranks that started since, this often
# Each rank counts its multi-rank runs: the n-th run of every rank is the same launch directory.
_runs_started = itertools.count()


def this_rank() -> RankEnv | None:
    """The rank, for what only rank 0 does (display, announce); unsound variables tell nothing here
    (TrainingMonitor refused them when it was made)."""
    try:
        return rank_env()
    except ValueError:
        return None


def other_rank() -> bool:
    """A rank other than 0 of a multi-rank run: it never displays."""
    ranks = this_rank()
    return ranks is not None and ranks.rank != 0


class LaunchRecording:
    """One run's place in its launch (nothing for a single-process run). Called by RunWriter."""

    def __init__(self) -> None:
        self.ranks: RankEnv | None = None
        self.index = 0
        self.meta: dict[str, Any] | None = None  # the launch's run.json, on rank 0
        self.launch: Any = None  # the launch directory, once agreed
        self.hosts: dict[int, str] = {}
        self.hosts_due = 0.0
        self.notes: list[str] = []  # of the last look for hosts

    @staticmethod
    def check() -> None:
        """At construction: RANK / WORLD_SIZE that are set but unsound are a clear ValueError."""
        rank_env()

    def start(self) -> None:
        """A fresh run starts (on the loop's thread): is it one rank of several?"""
        self.ranks = rank_env()
        if self.ranks is not None:
            self.index = next(_runs_started)

    def pending(self, rl: RunLog | None) -> bool:
        """The rank's directory is not agreed yet: log() must not wait for the writer meanwhile."""
        return self.ranks is not None and rl is not None and rl.path is None

    def open(self, rl: RunLog) -> list[str]:
        """Agree on the launch directory and open the rank's run log in it (the monitor's thread).
        Returns the notes for the run (how the directory was agreed on)."""
        r = self.ranks
        assert r is not None
        meta = rl.meta
        launch = launch_meta(meta.get("title") or "Training", r.world_size, [r.host], meta.get("started"),
                             r.launch_key, meta.get("gpu_widgets_version") or "")
        place = agree(rl.root, meta.get("title"), r, launch, index=self.index)
        meta.update(rank=r.rank, world_size=r.world_size, local_rank=r.local_rank, host=r.host, launch=place.name)
        rl.open(place.rank_path, keep=place.launch, prune_root=r.local_rank == 0)
        self.launch = place.launch
        if r.rank == 0:
            self.meta, self.hosts, self.hosts_due = launch, {0: r.host}, time.monotonic() + 1.0
        else:
            print(f"gpu-widgets: rank {r.rank}/{r.world_size} records to {place.rank_path}", file=sys.stderr,
                  flush=True)
        return place.notes

    def tick(self) -> None:
        """Rank 0, now and then: the launch's run.json lists the hosts of the ranks seen so far."""
        if self.meta is not None and time.monotonic() >= self.hosts_due:
            self.hosts_due = time.monotonic() + HOSTS_EVERY_S
            self._note_hosts()

    def _note_hosts(self) -> None:
        self.notes = []
        self.hosts = rank_hosts(self.launch, self.hosts, self.notes)
        hosts = sorted(set(self.hosts.values()))
        if self.meta is not None and hosts != self.meta["hosts"]:
            self.meta["hosts"] = hosts
            write_launch_meta(self.launch, self.meta)

    def close(self, status: str, ended: float | None) -> None:
        """Rank 0's run ended: the launch's run.json says so (each rank's own says how it ended)."""
        if self.meta is not None:
            self.meta.update(status=getattr(status, "value", str(status)), ended=ended)
            self.hosts_due = 0.0
            self._note_hosts()
            write_launch_meta(self.launch, self.meta)

    def reopened(self) -> None:
        """Rank 0's run resumed after a pause: the launch is running again."""
        if self.meta is not None:
            self.meta.update(status="running", ended=None)
            write_launch_meta(self.launch, self.meta)

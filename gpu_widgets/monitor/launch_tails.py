"""Reading every rank of a launch for its one view (rank_charts): each rank's data_wait.jsonl and,
for ranks other than 0 (whose run the view already reads), its gpu.jsonl, incrementally.

``load()`` reads them to the end once; ``follow()`` reads what was added at each pass. A pass reads
at most ``max_bytes`` of each file, so a long launch fills in a chunk at a time. What is read goes
to the run through RunFeed's hooks (``add_rank_bins``, ``add_rank_gpus``); a file that cannot be
read is a note, and the other ranks go on.
"""
from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..runs.file_reads import RunFileError
from ..runs.follow import RunTail
from ..runs.launch_dir import rank_dir

PASS_BYTES = 1 << 20  # per rank and file in one pass
LOAD_PASSES = 10_000  # load(): a bound on the passes (1 MiB each) over one file, never reached in practice


class LaunchTails:
    """One launch's ranks, each read from where the last pass stopped."""

    def __init__(self, launch: Path) -> None:
        self.launch = launch
        self.tails: dict[int, RunTail] = {}
        self.broken: set[int] = set()  # ranks whose files could not be read on: left alone

    def read(self, feed: Any, ranks: Iterable[tuple[int, str | None]], max_bytes: int = PASS_BYTES) -> bool:
        """One pass over ``ranks`` ((rank, host)); True when every rank's files are read to their end."""
        caught_up = True
        for rank, host in ranks:
            if rank in self.broken:
                continue
            tail = self.tails.get(rank)
            if tail is None:
                try:
                    tail = self.tails[rank] = RunTail(rank_dir(self.launch, rank))
                except (OSError, TypeError):
                    continue  # not started yet (no run.json): the next pass looks again
            try:
                bins, notes = tail.data_wait_rows(max_bytes)
                feed.add_rank_bins(rank, host, bins)
                if rank != 0:
                    rows, gpu_notes = tail.gpu_rows(max_bytes)
                    feed.add_rank_gpus(rank, host, rows, tail.gpu)
                    notes += gpu_notes
            except (OSError, RunFileError) as exc:
                self.broken.add(rank)
                feed.note(f"rank {rank}: {exc}; its charts stop here")
                continue
            for note in notes:
                feed.note(f"rank {rank}: {note}")
            caught_up = caught_up and tail.waits.caught_up and (rank == 0 or tail.gpu.caught_up)
        return caught_up

    def read_all(self, feed: Any, ranks: Iterable[tuple[int, str | None]]) -> None:
        ranks = list(ranks)
        for _ in range(LOAD_PASSES):
            if self.read(feed, ranks):
                return

"""`gpu-widgets runs`: the recent runs in the run log, newest first."""
from __future__ import annotations

import argparse
import json
import os
import re
import time
from pathlib import Path
from typing import Any

from ..runs.listing import RunInfo, list_runs
from ..runs.run_log import ENV_DIR, default_root

DEFAULT_LIMIT = 20
COLUMNS = ("NAME", "STATUS", "STEPS", "STARTED", "UPDATED", "DIRECTORY")
MAX_NAME = 32
MAX_NOTE = 300
# Shown escaped: C0 and C1 controls and DEL (terminal escape sequences start with them), and the
# bidirectional overrides that reorder what the eye reads.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


class UsageError(Exception):
    """A bad argument: exit 2 with the message."""


def _limit(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number of runs, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {text!r}")
    return value


def add_parser(sub: Any) -> None:
    runs = sub.add_parser("runs", help="list recent training runs from the run log, newest first (a "
                          "multi-rank launch is one run, with its world size)")
    runs.add_argument("--limit", type=_limit, default=DEFAULT_LIMIT, metavar="N",
                      help=f"show the N newest runs (default {DEFAULT_LIMIT})")
    runs.add_argument("--all", action="store_true", help="show every run (overrides --limit)")
    runs.add_argument("--json", action="store_true", help="print a JSON list (times in seconds since the epoch)")
    runs.add_argument("--dir", type=Path, metavar="DIR",
                      help=f"the run-log directory to read (default: ${ENV_DIR}, else the user data directory)")


def main(args: argparse.Namespace) -> int:
    root, source = _root(args.dir)
    if source and not root.is_dir():
        what = "is not a directory" if root.exists() else "does not exist"
        raise UsageError(f"{source} {str(root)!r} {what}")
    try:
        runs = list_runs(root) if root.is_dir() else []
    except OSError as exc:
        raise UsageError(f"{str(root)!r} cannot be read ({exc.strerror or exc})") from None
    shown = runs if args.all else runs[: args.limit]
    if args.json:
        print(json.dumps([r.as_json() for r in shown], indent=1))
        return 0
    if not runs:
        print(f"No runs in {root}")
        return 0
    print(render(shown))
    for r in shown:
        if r.note:
            print(f"note: {printable(r.directory)}: {_cut(printable(' '.join(r.note.split())), MAX_NOTE)}")
    if len(shown) < len(runs):
        print(f"({len(runs) - len(shown)} older runs not shown: --all shows them)")
    return 0


def _root(given: Path | None) -> tuple[Path, str]:
    """The run-log directory and who named it ("" for the default, which a new user may not have yet:
    that is "No runs"; a directory the user named that is missing is a typo worth an error)."""
    if given is not None:
        return given.expanduser(), "--dir"
    source = f"${ENV_DIR}" if os.environ.get(ENV_DIR, "").strip() else ""
    return default_root(), source


def render(runs: list[RunInfo]) -> str:
    """The table; a RANKS column (each launch's world size) only when a launch is among the runs."""
    ranks = any(r.world_size > 1 for r in runs)
    columns = (*COLUMNS[:3], "RANKS", *COLUMNS[3:]) if ranks else COLUMNS
    rows = [columns] + [(_name(r.name), _cut(printable(r.status), MAX_NAME), f"{r.steps:,}",
                         *([f"{r.world_size:,}"] if ranks else []), _when(r.started), _when(r.updated),
                         printable(r.directory)) for r in runs]
    widths = [max(len(row[i]) for row in rows) for i in range(len(columns) - 1)]
    numbers = (2, 3) if ranks else (2,)
    lines = []
    for row in rows:
        cells = [cell.rjust(w) if i in numbers else cell.ljust(w) for i, (cell, w) in enumerate(zip(row, widths))]
        lines.append("  ".join([*cells, row[-1]]))
    return "\n".join(lines)


def printable(text: str) -> str:
    """``text`` with control characters shown as escapes (``\\x1b``), so that nothing read from a
    run directory can move the cursor, recolour or retitle the user's terminal."""
    return _CONTROL.sub(lambda m: ascii(m.group())[1:-1], text)


def _name(name: str) -> str:
    return _cut(printable(" ".join(name.split())), MAX_NAME)  # a title with line breaks must not break the table


def _cut(text: str, most: int) -> str:
    return text if len(text) <= most else text[: most - 1] + "…"


def _when(t: float | None) -> str:
    if t is None:
        return "-"
    try:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))
    except (OverflowError, OSError, ValueError):  # a time beyond what the platform's clock spells
        return "?"

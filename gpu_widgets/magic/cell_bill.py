"""``%gpu_cells``: the notebook's GPU bill in the kernel, one row per cell that used a GPU.

The figures come from the Jupyter server this kernel belongs to (``cells/summary``, the route the
cell lines use, asked with the server's token and no proxy), or, where there is none, from the
kernel's own cell book and sampler (cell_book.py). An HTML table in a notebook, plain text
elsewhere; a total of GPU-hours and energy.
"""
from __future__ import annotations

import html
import json
import os
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ..service.cell_cost import summarize
from .cell_book import CellBook, CellRecord

TIMEOUT_S = 5.0
MAX_BYTES = 1 << 20
WORKERS = 4
GIB = 1 << 30


def kernel_id() -> str | None:
    """This kernel's id, from its connection file's name (``kernel-<id>.json``)."""
    try:
        from ipykernel.connect import get_connection_file

        name = os.path.basename(get_connection_file())
    except Exception:  # not an ipykernel (plain IPython)
        return None
    if name.startswith("kernel-") and name.endswith(".json"):
        return name[len("kernel-"):-len(".json")]
    return None


def own_server() -> dict[str, Any] | None:
    from ..memory.kernel_notebooks import own_server as find

    try:
        return find()
    except Exception:  # unreadable runtime files: no server
        return None


def _get(info: dict[str, Any], path: str, query: dict[str, Any]) -> Any:
    url = info.get("url")
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise OSError("the server listens on a unix socket")
    token = info.get("token") or os.environ.get("JUPYTERHUB_API_TOKEN")
    request = urllib.request.Request(f"{url.rstrip('/')}/{path}?{urllib.parse.urlencode(query)}",
                                     headers={"Authorization": f"token {token}"} if token else {})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never send the token to a proxy
    with opener.open(request, timeout=TIMEOUT_S) as answer:
        body = answer.read(MAX_BYTES + 1)
    if len(body) > MAX_BYTES:
        raise OSError("the server's answer is too large")
    return json.loads(body)


def next_start(book: CellBook, end: float) -> float | None:
    """When the kernel's next cell began after ``end`` (what was read after it may be that cell's)."""
    later = [c.start for c in book.cells if c.start >= end]
    return min(later) if later else None


def from_server(info: dict[str, Any], kernel: str, book: CellBook,
                cells: list[CellRecord]) -> list[dict[str, Any] | None]:
    """Each cell's summary from the server (None where it could not say)."""
    def one(cell: CellRecord) -> dict[str, Any] | None:
        query = {"kernel_id": kernel, "start": repr(cell.start), "end": repr(cell.end)}
        following = next_start(book, cell.end or cell.start)
        if following is not None:
            query["next_start"] = repr(following)
        try:
            return _get(info, "gpu-widgets/api/v1/cells/summary", query)
        except Exception:  # a refusal (an old server, no extension), a timeout: no figures for it
            return None

    with ThreadPoolExecutor(WORKERS) as pool:
        return list(pool.map(one, cells))


def from_book(book: CellBook, cells: list[CellRecord]) -> list[dict[str, Any] | None]:
    sampler = book._sampler
    history = sampler.history if sampler is not None else None
    interval = sampler.interval_s if sampler is not None else 1.0
    after_s = 1.5 * (sampler.slow_interval_s if sampler is not None else 2.0) + 0.5
    out = []
    for c in cells:
        end = c.end if c.end is not None else c.start
        entries, after = book.between(c.start, end, after_s, next_start(book, end))
        out.append(summarize(entries, [], history, c.start, end, False, interval, after))
    return out


def _bytes(n: int | None) -> str:
    if n is None:
        return "–"
    return f"{n / GIB:.1f} GiB" if abs(n) >= GIB else f"{n / (1 << 20):.0f} MiB"


def _energy(j: float | None) -> str:
    if j is None:
        return "–"
    return f"{j:.0f} J" if j < 1000 else f"{j / 1000:.1f} kJ" if j < 1e6 else f"{j / 1e6:.1f} MJ"


def _duration(s: float) -> str:
    if s < 60:
        return f"{s:.1f} s" if s < 10 else f"{s:.0f} s"
    return f"{int(s // 60)} min {int(s % 60)} s" if s < 3600 else f"{int(s // 3600)} h {int(s % 3600 // 60)} min"


def rows(cells: list[CellRecord], summaries: list[dict[str, Any] | None]) -> list[dict[str, Any]]:
    """The bill's rows: the cells that used a GPU, in the order they ran."""
    out = []
    for cell, s in zip(cells, summaries):
        if not s or not s.get("gpus"):
            continue
        gpus = s["gpus"]
        peaks = [g["peak_memory_bytes"] for g in gpus if g["peak_memory_bytes"] is not None]
        energies = [g["energy_j"] for g in gpus if g["energy_j"] is not None]
        out.append({"count": cell.count, "first_line": cell.first_line, "duration_s": s["duration_s"],
                    "gpus": [g["index"] for g in gpus], "peak_memory_bytes": sum(peaks) if peaks else None,
                    "energy_j": sum(energies) if energies else None, "restarted": s.get("restarted", False),
                    "shared": any(g["shared_with"] for g in gpus)})
    return out


def total(bill: list[dict[str, Any]]) -> str:
    hours = sum(r["duration_s"] * len(r["gpus"]) for r in bill) / 3600
    energies = [r["energy_j"] for r in bill if r["energy_j"] is not None]
    minutes, seconds = round(hours * 60), round(hours * 3600)
    spent = (f"{seconds} GPU-second{'s' if seconds != 1 else ''}" if hours * 60 < 1 else
             f"{minutes} GPU-minute{'s' if minutes != 1 else ''}" if hours < 1 else f"{hours:.2f} GPU-hours")
    words = f"{len(bill)} cell{'s' if len(bill) != 1 else ''} · {spent}"
    return words + (f" · {_energy(sum(energies))}" if energies else "")


COLUMNS = ("Cell", "First line", "Time", "GPUs", "Peak", "Energy")


def _cells_of(r: dict[str, Any]) -> tuple[str, ...]:
    note = " (restarted)" if r["restarted"] else ""
    return (f"[{r['count'] if r['count'] is not None else ' '}]", r["first_line"] + note, _duration(r["duration_s"]),
            ", ".join(map(str, r["gpus"])), _bytes(r["peak_memory_bytes"]),
            _energy(r["energy_j"]) + (" *" if r["shared"] else ""))


def as_text(bill: list[dict[str, Any]], source: str) -> str:
    if not bill:
        return f"No cell used a GPU ({source})."
    table = [COLUMNS, *(_cells_of(r) for r in bill)]
    widths = [max(len(row[i]) for row in table) for i in range(len(COLUMNS))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in table]
    lines.append(f"Total: {total(bill)}")
    if any(r["shared"] for r in bill):
        lines.append("* the GPU was shared with other processes: its energy is the whole GPU's")
    lines.append(f"({source})")
    return "\n".join(lines)


def as_html(bill: list[dict[str, Any]], source: str) -> str:
    esc = html.escape
    if not bill:
        return f"<p class='gpuw-cells'>No cell used a GPU <small>({esc(source)})</small>.</p>"
    head = "".join(f"<th style='text-align:{'left' if i < 2 else 'right'}'>{esc(c)}</th>" for i, c in enumerate(COLUMNS))
    body = "".join("<tr>" + "".join(f"<td style='text-align:{'left' if i < 2 else 'right'}'>"
                                    f"{'<code>' + esc(v) + '</code>' if i == 1 else esc(v)}</td>"
                                    for i, v in enumerate(_cells_of(r))) + "</tr>" for r in bill)
    note = ("<br><small>* the GPU was shared with other processes: its energy is the whole GPU's</small>"
            if any(r["shared"] for r in bill) else "")
    return (f"<table class='gpuw-cells'><thead><tr>{head}</tr></thead><tbody>{body}</tbody>"
            f"<tfoot><tr><td colspan='{len(COLUMNS)}'><b>Total: {esc(total(bill))}</b>{note}"
            f"<br><small>{esc(source)}</small></td></tr></tfoot></table>")

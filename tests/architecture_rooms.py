"""The rooms table of docs/architecture.md, read as data, and the imports checked against it.

A room is a direct child of the package: a folder (``metrics/``) or a top-level module
(``pick.py``; the package's own ``__init__.py`` is one too). The table's Room cell names it in
backticks; its Imports cell lists, in backticks, every room it may import, or says "nothing".
Everything else in that cell is remarks in plain words; a remark "never X" (X in backticks or
not) is no permission, and when X is a room it is checked too (X must not be listed). Rules finer than a room (one module of a room) are
``FinerRule``s, kept beside the table in docs/architecture.md ("Finer rules").
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from .architecture_graph import Graph, Import

SECTION = "Rooms"
TICKED = re.compile(r"`([^`]+)`")
NEVER = re.compile(r"never\s+([\w.]+/?)")
NEVER_TICKED = re.compile(r"never\s+`[^`]+`")
PATH = re.compile(r"^[\w./-]+\.(?:py|json)$")  # a file the doc points at, e.g. runs/run_log.py


@dataclass(frozen=True)
class Room:
    name: str  # metrics/, pick.py, __init__.py
    allowed: frozenset[str]  # the rooms it may import
    never: frozenset[str]  # the rooms its remarks say it never imports
    line: int  # its row in the doc, for messages


def _is_room_name(name: str) -> bool:
    return name.endswith("/") or name.endswith(".py")


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def table_rows(text: str, section: str, doc: str, needed: tuple[str, ...]) -> list[tuple[int, dict[str, str]]]:
    """(line number, {column: cell}) of each row of the first table under the ``## <section>``
    heading (the front end's map reads its table with this too); ValueError naming the doc."""
    lines = text.splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if line.strip() == f"## {section}")
    except StopIteration:
        raise ValueError(f"{doc} has no '## {section}' section") from None
    rows: list[tuple[int, dict[str, str]]] = []
    columns: list[str] | None = None
    for number, line in enumerate(lines[start + 1:], start + 2):
        if line.startswith("#") or (columns is not None and not line.startswith("|")):
            break  # the next section, or the end of the table
        if not line.startswith("|"):
            continue
        cells = _cells(line)
        if columns is None:
            columns = cells
            if not set(needed) <= set(columns):
                raise ValueError(f"{doc}:{number}: the {section} table needs the columns {', '.join(needed)}")
            continue
        if set("".join(cells)) <= set("-: "):
            continue  # the |---| row
        rows.append((number, dict(zip(columns, cells))))
    if not rows:
        raise ValueError(f"{doc}: the '## {section}' section has no table rows")
    return rows


def read_rooms(text: str, doc: str) -> dict[str, Room]:
    """The rows of the first table under ``## Rooms``; ValueError naming the line of a row it cannot read."""
    rooms: dict[str, Room] = {}
    for number, row in table_rows(text, SECTION, doc, ("Room", "Imports")):
        room_cell, imports_cell = row["Room"], row["Imports"]
        names = TICKED.findall(room_cell)
        if len(names) != 1 or not _is_room_name(names[0]):
            raise ValueError(f"{doc}:{number}: the Room cell must be one name in backticks ending in / or .py,"
                             f" not {room_cell!r}")
        plain = imports_cell.replace("*", "")
        # "never `backends/`" is a remark even in backticks: only what is left lists rooms.
        allowed = TICKED.findall(NEVER_TICKED.sub("", plain))
        if not allowed and not imports_cell.lower().startswith("nothing"):
            raise ValueError(f"{doc}:{number}: the Imports cell of {names[0]} lists no room in backticks"
                             " and does not say 'nothing'")
        odd = [name for name in allowed if not _is_room_name(name)]
        if odd:
            raise ValueError(f"{doc}:{number}: the Imports cell of {names[0]} has {odd} in backticks: only"
                             " room names go in backticks there, remarks are plain words")
        words = TICKED.sub(r"\1", plain)
        never = {name for found in NEVER.findall(words) if _is_room_name(name := found.rstrip(".,;"))}
        if names[0] in rooms:
            raise ValueError(f"{doc}:{number}: a second row for {names[0]}")
        rooms[names[0]] = Room(names[0], frozenset(allowed), frozenset(never), number)
    return rooms


def room_of(graph: Graph, module: str) -> str | None:
    """The room a module of the package lies in, or None for a module outside it."""
    if module == graph.top:
        return "__init__.py"
    if not module.startswith(graph.top + "."):
        return None
    child = module.split(".")[1]
    return f"{child}/" if (graph.root / graph.top / child).is_dir() else f"{child}.py"


def rooms_of(graph: Graph) -> set[str]:
    # A folder with no Python in it (the prebuilt labextension) is data, not a room.
    return {room for module in graph.modules if (room := room_of(graph, module))}


def _allowed_words(room: Room) -> str:
    return ", ".join(sorted(room.allowed)) or "nothing"


def room_problems(graph: Graph, rooms: dict[str, Room], doc: str) -> list[str]:
    """Everything that makes the table and the tree disagree, one message each (file and line first)."""
    problems = []
    present = rooms_of(graph)
    for name in sorted(present - rooms.keys()):
        problems.append(f"{graph.top}/{name} has no row in {doc} ({SECTION}): add one saying what it holds"
                        " and which rooms it may import")
    for name in sorted(rooms.keys() - present):
        problems.append(f"{doc}:{rooms[name].line}: the row for {name} names no room of {graph.top}/")
    for room in rooms.values():
        for other in sorted(room.allowed - rooms.keys()):
            problems.append(f"{doc}:{room.line}: {room.name} may import {other}, which has no row")
        for other in sorted(room.allowed & room.never):
            problems.append(f"{doc}:{room.line}: {room.name} lists {other} and also says it never imports it")
        if room.name in room.allowed:
            problems.append(f"{doc}:{room.line}: {room.name} lists itself")
    for imp in graph.imports + graph.by_name:
        source, target = room_of(graph, imp.module), room_of(graph, imp.target)
        if target is None or source == target or source not in rooms:
            continue
        if target not in rooms[source].allowed:
            how = " (type-only)" if imp.type_only else " (by name)" if imp.by_name else ""
            problems.append(f"{imp.path}:{imp.line} imports {imp.target}{how}: {source} may import"
                            f" {_allowed_words(rooms[source])} ({doc}, {SECTION})")
    return list(dict.fromkeys(problems))  # ``from x import a, b`` is one message, not two


def unused_arrows(graph: Graph, rooms: dict[str, Room], doc: str) -> list[str]:
    """Arrows of the table that no import takes: a permission nobody needs hides the next drift."""
    used = {(room_of(graph, imp.module), room_of(graph, imp.target)) for imp in graph.imports + graph.by_name}
    return [f"{doc}:{room.line}: {room.name} may import {other}, but no module of it does: drop it from the row"
            for room in rooms.values() for other in sorted(room.allowed) if (room.name, other) not in used]


def missing_paths(text: str, doc: str, root: Path, graph: Graph, rooms: dict[str, Room]) -> list[str]:
    """Files the doc names in backticks (``runs/run_log.py``, ``gpu_widgets/...``, ``tests/...``) that do not exist."""
    folders = {name for name in rooms if name.endswith("/")}
    missing = []
    for number, line in enumerate(text.splitlines(), 1):
        for token in TICKED.findall(line):
            if not PATH.match(token):
                continue
            first = token.split("/")[0] + "/"
            if first in (f"{graph.top}/", "tests/"):
                where = root / token
            elif first in folders:
                where = root / graph.top / token
            else:
                continue  # a bare file name, or the front end's (see the doc's Front end section)
            if not where.exists():
                missing.append(f"{doc}:{number}: `{token}` does not exist")
    return missing


@dataclass(frozen=True)
class FinerRule:
    """A rule about some modules of a room, finer than the table can say."""

    name: str
    says: str  # as docs/architecture.md says it
    importers: str  # the modules it binds: this one and everything under it
    forbidden: tuple[str, ...]  # what they may not import (these and everything under them)
    exempt: tuple[str, ...] = ()  # importing modules it does not bind
    still_allowed: tuple[str, ...] = ()  # targets under ``forbidden`` that stay allowed

    def broken_by(self, imports: list[Import]) -> list[Import]:
        def under(name: str, prefixes: tuple[str, ...]) -> bool:
            return any(name == p or name.startswith(p + ".") for p in prefixes)

        return [imp for imp in imports
                if under(imp.module, (self.importers,)) and not under(imp.module, self.exempt)
                and under(imp.target, self.forbidden) and not under(imp.target, self.still_allowed)]


FINER_RULES = [
    FinerRule("server-through-service",
              "server/ reaches the GPUs through service/: only server/app.py imports backends/ and sampling/"
              " (its settings: the backend choices, the sampling bounds); never the handlers",
              "gpu_widgets.server", ("gpu_widgets.backends", "gpu_widgets.sampling"),
              exempt=("gpu_widgets.server.app",)),
    FinerRule("service-parts-never-import-their-owner",
              "the parts of service/ never import its owner, service/service.py (GpuService), type-only"
              " imports included: they are handed values or small callables",
              "gpu_widgets.service", ("gpu_widgets.service.service",), exempt=("gpu_widgets.service.service",)),
    FinerRule("magic-uses-cli-render-only",
              "magic/ uses cli/ for its plain-text rendering only (cli/render.py)",
              "gpu_widgets.magic", ("gpu_widgets.cli",), still_allowed=("gpu_widgets.cli.render",)),
    FinerRule("frameworks-only-in-integrations",
              "a training framework (torch, lightning, transformers, keras) is imported only in integrations/ "
              "(and torch, lazily, in parallel/, profiling/ and memory/recording.py)",
              "gpu_widgets", ("torch", "lightning", "pytorch_lightning", "transformers", "keras"),
              exempt=("gpu_widgets.integrations", "gpu_widgets.parallel", "gpu_widgets.profiling",
                      "gpu_widgets.memory.recording")),
]

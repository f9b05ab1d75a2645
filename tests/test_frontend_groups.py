"""The front end's map: the "Front end" table of docs/architecture.md read as data, and every
import between the folders of labextension/src/ checked against it, as test_architecture.py
checks the Python rooms against the Rooms table.

A group is a folder of labextension/src/ (or a file at its top, ``index.ts``). Its **Uses** cell
lists in backticks every group it may import from, or says "nothing"; words in brackets are
remarks. The jest tests (``__tests__/``) are no group: they may import anything.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from .architecture_rooms import table_rows

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "architecture.md"
SRC = ROOT / "labextension" / "src"
SECTION = "Front end"
TESTS = "__tests__"
TICKED = re.compile(r"`([^`]+)`")
IMPORT = re.compile(r"""(?:^|\s)(?:import|export)\s[^;'"]*?from\s+['"](\.{1,2}/[^'"]+)['"]|import\(\s*['"](\.{1,2}/[^'"]+)['"]""", re.M)


@dataclass(frozen=True)
class Group:
    name: str  # api/, index.ts
    uses: frozenset[str]
    files: frozenset[str]  # the .ts/.tsx files its row names
    line: int


def _group_name(name: str) -> bool:
    return name.endswith("/") or name.endswith((".ts", ".tsx"))


def read_groups(text: str, doc: str) -> dict[str, Group]:
    """The rows of the first table under ``## Front end``; ValueError naming a row it cannot read."""
    groups: dict[str, Group] = {}
    for number, row in table_rows(text, SECTION, doc, ("Group", "What it holds", "Uses")):
        names = TICKED.findall(row["Group"])
        if len(names) != 1 or not _group_name(names[0]):
            raise ValueError(f"{doc}:{number}: the Group cell must be one folder/ or file in backticks")
        uses_cell = re.sub(r"\([^)]*\)", "", row["Uses"])  # remarks in brackets
        uses = TICKED.findall(uses_cell)
        if not uses and not uses_cell.strip().lower().startswith("nothing"):
            raise ValueError(f"{doc}:{number}: the Uses cell of {names[0]} lists no group and does not say 'nothing'")
        bad = [u for u in uses if not _group_name(u)]
        if bad:
            raise ValueError(f"{doc}:{number}: the Uses cell of {names[0]} has {bad} in backticks: only groups go there")
        files = {f for f in TICKED.findall(row["What it holds"]) if f.endswith((".ts", ".tsx"))}
        if names[0] in groups:
            raise ValueError(f"{doc}:{number}: a second row for {names[0]}")
        groups[names[0]] = Group(names[0], frozenset(uses), frozenset(files), number)
    return groups


def group_of(src: Path, path: Path) -> str | None:
    rel = path.relative_to(src)
    if rel.parts[0] == TESTS:
        return None
    return f"{rel.parts[0]}/" if len(rel.parts) > 1 else rel.name


def sources(src: Path) -> list[Path]:
    return sorted(p for p in src.rglob("*") if p.suffix in (".ts", ".tsx") and TESTS not in p.parts)


def imports(src: Path) -> list[tuple[Path, int, str, str]]:
    """(file, line, the import's text, the group it reaches) for every relative import of a source."""
    found = []
    for path in sources(src):
        text = path.read_text()
        for m in IMPORT.finditer(text):
            spec = m.group(1) or m.group(2)
            target = (path.parent / spec).resolve()
            try:
                target.relative_to(src.resolve())
            except ValueError:
                continue  # package.json, the style folder: outside the groups
            line = text.count("\n", 0, m.start(1) if m.group(1) else m.start(2)) + 1
            rel = target.relative_to(src.resolve())
            reached = f"{rel.parts[0]}/" if len(rel.parts) > 1 else rel.name
            found.append((path, line, spec, reached if reached.endswith("/") or "." in reached else reached + ".ts"))
    return found


def problems(src: Path, groups: dict[str, Group], doc: str) -> list[str]:
    """Every import the table does not allow, every group without a row and row without a group,
    every arrow no import takes, every file a row names that is not in its group."""
    out = []
    present = {g for p in sources(src) if (g := group_of(src, p))}
    out += [f"labextension/src/{g} has no row in the Front end table of {doc}" for g in sorted(present - set(groups))]
    out += [f"{doc}:{groups[g].line}: the Front end table has a row for {g}, which is not in labextension/src/"
            for g in sorted(set(groups) - present)]
    taken: set[tuple[str, str]] = set()
    for path, line, spec, reached in imports(src):
        group = group_of(src, path)
        if group is None or reached == group or group not in groups:
            continue
        taken.add((group, reached))
        if reached not in groups[group].uses:
            allowed = ", ".join(sorted(groups[group].uses)) or "nothing"
            out.append(f"{path.relative_to(src.parents[1])}:{line} imports {spec!r} ({reached}): {group} may use "
                       f"{allowed} ({doc}, Front end)")
    for g in sorted(set(groups) & present):
        for used in sorted(groups[g].uses - {u for (grp, u) in taken if grp == g}):
            out.append(f"{doc}:{groups[g].line}: {g} lists {used}, but no file of {g} imports it: drop the arrow")
        folder = src / g if g.endswith("/") else src
        for f in sorted(groups[g].files):
            if not (folder / f).is_file():
                out.append(f"{doc}:{groups[g].line}: {g} names {f}, which is not in labextension/src/{g if g.endswith('/') else ''}")
    return out


def test_every_import_between_front_end_groups_is_one_the_table_allows():
    groups = read_groups(DOC.read_text(), "docs/architecture.md")
    assert problems(SRC, groups, "docs/architecture.md") == []


def test_the_front_end_groups_have_no_cycle():
    groups = read_groups(DOC.read_text(), "docs/architecture.md")
    seen: dict[str, int] = {}

    def visit(g: str, path: list[str]) -> None:
        if seen.get(g) == 2:
            return
        assert seen.get(g) != 1, f"the Front end table has a cycle: {' -> '.join(path + [g])}"
        seen[g] = 1
        for u in groups[g].uses:
            if u in groups:
                visit(u, path + [g])
        seen[g] = 2

    for g in groups:
        visit(g, [])


MADE_UP = """# Made up

## Front end

| Group | What it holds | Uses |
| --- | --- | --- |
| `api/` | the requests (`request.ts`) | nothing |
| `views/` | the views (`view.tsx`) | `api/` (the request) |
| `index.ts` | the plugin | `views/` |
{extra}
## Next
"""


def _tree(tmp_path: Path, view_imports: str, extra_files: dict[str, str] | None = None) -> Path:
    src = tmp_path / "labextension" / "src"
    files = {"api/request.ts": "export const a = 1;\n",
             "views/view.tsx": view_imports,
             "index.ts": "import { v } from './views/view';\n",
             "__tests__/x.spec.ts": "import { a } from '../api/request';\nimport { v } from '../views/view';\n",
             **(extra_files or {})}
    for name, text in files.items():
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        (src / name).write_text(text)
    return src


def test_the_groups_check_passes_a_tree_that_keeps_its_table(tmp_path):
    src = _tree(tmp_path, "import { a } from '../api/request';\n")
    assert problems(src, read_groups(MADE_UP.format(extra=""), "made.md"), "made.md") == []


def test_the_groups_check_names_file_line_and_group_of_a_forbidden_import(tmp_path):
    src = _tree(tmp_path, "import { a } from '../api/request';\n",
                {"api/request.ts": "// the api may use nothing\nimport type { V } from '../views/view';\nexport const a = 1;\n"})
    found = problems(src, read_groups(MADE_UP.format(extra=""), "made.md"), "made.md")
    assert found == ["labextension/src/api/request.ts:2 imports '../views/view' (views/): api/ may use nothing (made.md, Front end)"]


def test_the_groups_check_fails_a_folder_without_a_row_a_row_without_a_folder_and_an_unused_arrow(tmp_path):
    src = _tree(tmp_path, "export const v = 1;\n", {"extra/thing.ts": "export const t = 1;\n"})
    rows = MADE_UP.format(extra="| `gone/` | nothing any more (`old.ts`) | `api/` |\n")
    found = problems(src, read_groups(rows, "made.md"), "made.md")
    assert "labextension/src/extra/ has no row in the Front end table of made.md" in found
    assert any("row for gone/, which is not in labextension/src/" in f for f in found)
    assert any(f.endswith("views/ lists api/, but no file of views/ imports it: drop the arrow") for f in found)


def test_the_front_end_table_is_read_strictly():
    with pytest.raises(ValueError, match=r"made.md:\d+: the Uses cell of `?bad/`? lists no group"):
        read_groups(MADE_UP.format(extra="| `bad/` | something | the api |\n"), "made.md")
    with pytest.raises(ValueError, match="a second row for api/"):
        read_groups(MADE_UP.format(extra="| `api/` | again | nothing |\n"), "made.md")

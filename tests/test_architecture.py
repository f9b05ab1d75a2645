"""The package's shape, checked: module sizes, which room may import which (the Rooms table of
docs/architecture.md, read as data) and the finer rules beside it, who may import pynvml, no imports
of a package above, no cycles between siblings, and the old import paths.

Every check names its offenders (file, line, what it imports) so a failure says what to move.
"""
from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from .architecture_graph import Import, scan
from .architecture_rooms import (FINER_RULES, FinerRule, missing_paths, read_rooms, room_problems,
                                 unused_arrows)

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "gpu_widgets"
TOP = "gpu_widgets"

MAX_MODULE_LINES = 400
MAX_MONITOR_LINES = 350  # TrainingMonitor's own module: a thin facade over its parts
MONITOR_MODULE = "gpu_widgets/monitor/monitor.py"
MAX_SOURCE_LINES = 400
NVML_ROOM = "gpu_widgets.backends.nvml"
BACKENDS = "gpu_widgets.backends"
DOC = "docs/architecture.md"  # its Rooms table says which room may import which
DOC_TEXT = (ROOT / DOC).read_text()


# -- the import graph, from the source (nothing is imported; see architecture_graph.py) ----------
GRAPH = scan(ROOT, TOP)
MODULES: dict[str, Path] = GRAPH.modules
PACKAGES = GRAPH.packages
IMPORTS: list[Import] = GRAPH.imports
_path_of = GRAPH.path_of


def _under(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def _child(package: str, name: str) -> str | None:
    """The child of ``package`` (module or subpackage) that ``name`` lies in, if any."""
    if not name.startswith(package + "."):
        return None
    return f"{package}.{name[len(package) + 1:].split('.')[0]}"


def find_cycle(edges: dict[str, dict[str, Import]]) -> list[str] | None:
    """One cycle in a directed graph, as [a, b, ..., a], or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(edges.get(node, {})):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for start in sorted(edges):
        if start not in state and (cycle := visit(start)):
            return cycle
    return None


def sibling_graph(package: str) -> dict[str, dict[str, Import]]:
    """child A -> child B -> one import that makes the edge, among ``package``'s children (its __init__ aside)."""
    edges: dict[str, dict[str, Import]] = {}
    for imp in IMPORTS:
        if imp.type_only or imp.module == package:
            continue
        source, target = _child(package, imp.module), _child(package, imp.target)
        if source and target and source != target:
            edges.setdefault(source, {}).setdefault(target, imp)
    return edges


# -- the helper itself, on made-up graphs (so a check that passes is not a check that cannot fail) --
def test_find_cycle_reports_the_cycle_and_nothing_when_there_is_none():
    edge = Import("m", 1, "t", "import t", False)
    assert find_cycle({"a": {"b": edge}, "b": {"c": edge}, "c": {"a": edge}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b": edge, "c": edge}, "b": {"c": edge}}) is None


def test_relative_imports_resolve_to_the_module_they_name():
    by_text = {(imp.module, imp.text): imp.target for imp in IMPORTS}
    assert by_text[("gpu_widgets.magic", "from .magics import load_ipython_extension as load")] == "gpu_widgets.magic.magics"
    assert by_text[("gpu_widgets.magic.magics", "from ..widgets import leases")] == "gpu_widgets.widgets.leases"
    assert by_text[("gpu_widgets", "from ._version import __version__")] == "gpu_widgets._version"


# -- sizes ----------------------------------------------------------------------------------------
def _lines(path: Path) -> int:
    return len(path.read_text(errors="replace").splitlines())


def test_no_module_is_over_400_lines():
    big = {str(p.relative_to(ROOT)): n for p in MODULES.values() if (n := _lines(p)) > MAX_MODULE_LINES}
    assert big == {}, f"modules over {MAX_MODULE_LINES} lines: {big}"


def test_the_training_monitor_module_is_a_thin_facade():
    n = _lines(ROOT / MONITOR_MODULE)
    assert n <= MAX_MONITOR_LINES, f"{MONITOR_MODULE} has {n} lines (at most {MAX_MONITOR_LINES}): move a part out"


def test_no_sidebar_source_is_over_400_lines_generated_ones_too():
    # scripts/gen-api.mjs writes the API types a file per tag of openapi.json to keep to this
    files = [p for p in sorted((ROOT / "labextension" / "src").rglob("*")) if p.is_file()]
    assert files, "labextension/src has no files"
    big = {str(p.relative_to(ROOT)): n for p in files if (n := _lines(p)) > MAX_SOURCE_LINES}
    assert big == {}, f"sidebar files over {MAX_SOURCE_LINES} lines: {big}"


# -- who imports what -----------------------------------------------------------------------------
def _imports_pynvml_by_name(module: str) -> list[str]:
    """importlib.import_module("pynvml") and __import__("pynvml") count too."""
    found = []
    for node in ast.walk(ast.parse(MODULES[module].read_text())):
        if (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
                and node.args[0].value == "pynvml"
                and getattr(node.func, "attr", getattr(node.func, "id", "")) in ("import_module", "__import__")):
            found.append(f"{_path_of(module)}:{node.lineno} (imports 'pynvml' by name)")
    return found


def test_pynvml_is_imported_only_by_the_nvml_backend():
    outside = [imp.where() for imp in IMPORTS if _under(imp.target, "pynvml") and not _under(imp.module, NVML_ROOM)]
    outside += [hit for module in MODULES if not _under(module, NVML_ROOM) for hit in _imports_pynvml_by_name(module)]
    assert outside == [], f"pynvml imported outside {NVML_ROOM}: {outside}"
    inside = [imp for imp in IMPORTS if _under(imp.target, "pynvml")]
    assert inside, "no module imports pynvml at all: has the NVML backend moved? update NVML_ROOM"


def test_widgets_monitor_and_magic_never_import_the_backends():
    # The table says so too ("never backends/"); this names it, so that a row edited to allow it fails here.
    rooms = read_rooms(DOC_TEXT, DOC)
    for name in ("widgets/", "monitor/", "magic/", "integrations/"):
        assert "backends/" not in rooms[name].allowed, f"{name} must reach the GPUs through sampling/"
    assert "gpu_widgets.server.handlers" in MODULES
    bad = [imp.where() for imp in IMPORTS if _under(imp.target, BACKENDS) and any(
        _under(imp.module, f"{TOP}.{room}") for room in ("widgets", "monitor", "magic", "integrations"))]
    assert bad == [], f"these import {BACKENDS} directly (go through gpu_widgets.sampling instead): {bad}"


def test_no_module_imports_the_init_of_a_package_above_it():
    # ``from .. import x`` is fine when x is a submodule (the target is then x itself); a name from the
    # package's __init__, or ``import gpu_widgets``, ties the module to everything that __init__ pulls in.
    # A package's __main__ is that package run as a script (nothing imports it): it may use the __init__.
    bad = []
    for imp in IMPORTS:
        if imp.module.endswith(".__main__") and imp.target == imp.module.rpartition(".")[0]:
            continue
        above = imp.target in PACKAGES and imp.target != imp.module and _under(imp.module, imp.target)
        if above or imp.target == TOP:
            bad.append(imp.where())
    assert bad == [], f"imports of a package's __init__ from inside it: {bad}"


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_no_import_cycle_among_the_children_of(package):
    cycle = find_cycle(sibling_graph(package))
    if cycle is None:
        return
    edges = sibling_graph(package)
    steps = [f"{a} -> {b}: {edges[a][b].where()}" for a, b in zip(cycle, cycle[1:])]
    pytest.fail(f"import cycle among the children of {package}: {' -> '.join(cycle)}\n  " + "\n  ".join(steps))


# -- the rooms: docs/architecture.md's table is the rule (architecture_rooms.py reads it) ----------
def _listed(problems: list[str]) -> str:
    return "\n  " + "\n  ".join(problems)


def test_every_import_between_rooms_is_one_the_rooms_table_allows():
    problems = room_problems(GRAPH, read_rooms(DOC_TEXT, DOC), DOC)
    assert problems == [], "the code and the rooms table of docs/architecture.md disagree:" + _listed(problems)


def test_every_arrow_of_the_rooms_table_is_one_some_import_takes():
    unused = unused_arrows(GRAPH, read_rooms(DOC_TEXT, DOC), DOC)
    assert unused == [], "the rooms table allows more than the code does:" + _listed(unused)


def test_the_rooms_table_has_no_cycle():
    rooms = read_rooms(DOC_TEXT, DOC)
    edges = {room.name: {other: Import(DOC, room.line, other, f"{room.name} may import {other}", False, DOC)
                         for other in room.allowed} for room in rooms.values()}
    cycle = find_cycle(edges)
    assert cycle is None, f"the rooms table has a cycle: {' -> '.join(cycle or [])}"


def test_the_two_wings_stay_apart():
    # The target of issue 24, which the table alone could lose by one edited row.
    rooms = read_rooms(DOC_TEXT, DOC)
    importers = {other: sorted(r.name for r in rooms.values() if other in r.allowed) for other in rooms}
    assert "monitor/" in rooms["widgets/"].never and "monitor/" not in rooms["widgets/"].allowed
    assert importers["server/"] == ["__init__.py"], "only the package's entry point loads the web layer"
    assert "server/" not in rooms["cli/"].allowed and "server/" not in rooms["service/"].allowed
    assert importers["monitor/"] == ["__init__.py", "integrations/"]


def test_the_files_the_architecture_names_exist():
    missing = missing_paths(DOC_TEXT, DOC, ROOT, GRAPH, read_rooms(DOC_TEXT, DOC))
    assert missing == [], "docs/architecture.md names files that are not there:" + _listed(missing)


@pytest.mark.parametrize("rule", FINER_RULES, ids=lambda rule: rule.name)
def test_finer_rule(rule: FinerRule):
    assert rule.name in DOC_TEXT, f"say the rule {rule.name!r} in docs/architecture.md (Finer rules)"
    bad = list(dict.fromkeys(f"{imp.where()} imports {imp.target}" for imp in rule.broken_by(IMPORTS)))
    assert bad == [], f"{rule.name}: {rule.says}:" + _listed(bad)


# -- the rooms check itself, on a made-up package (a check that passes must be one that can fail) --
MADE_UP_DOC = """# Made up

## Rooms

| Room | What it holds | Imports |
| --- | --- | --- |
| `__init__.py` | the face, loading its view on first use | `high/` (by name) |
| `low/` | the base | nothing |
| `high/` | what is built on it | `low/`; **never `tool.py`** |
| `tool.py` | a script | `low/` |
{extra_row}
## Next

| Room | What it holds | Imports |
| --- | --- | --- |
| `elsewhere/` | a table of another section: not read | nothing |
"""
MADE_UP_TREE = {
    "pkg/__init__.py": '_LAZY = {"View": "pkg.high.view"}\n',
    "pkg/low/__init__.py": "",
    "pkg/low/core.py": "X = 1\n",
    "pkg/high/__init__.py": "",
    "pkg/high/view.py": "from ..low import core\n",
    "pkg/tool.py": "import pkg.low.core\n",
}


def _made_up(tmp_path: Path, extra_files: dict[str, str], extra_row: str = ""):
    for name, text in {**MADE_UP_TREE, **extra_files}.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    graph = scan(tmp_path, "pkg")
    rooms = read_rooms(MADE_UP_DOC.format(extra_row=extra_row), "made.md")
    return room_problems(graph, rooms, "made.md"), unused_arrows(graph, rooms, "made.md")


def test_the_rooms_check_passes_a_tree_that_keeps_its_table(tmp_path):
    assert _made_up(tmp_path, {}) == ([], [])


def test_the_rooms_check_names_file_line_and_target_of_a_forbidden_import(tmp_path):
    problems, _ = _made_up(tmp_path, {
        "pkg/tool.py": "import pkg.low.core\nfrom typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                       "    from .high.view import View\n",
        "pkg/high/view.py": "from ..low import core\nimport pkg.tool\n",
        "pkg/low/core.py": "def later():\n    from ..high import view\n",
    })
    assert problems == [
        "pkg/high/view.py:2 imports pkg.tool: high/ may import low/ (made.md, Rooms)",
        "pkg/low/core.py:2 imports pkg.high.view: low/ may import nothing (made.md, Rooms)",
        "pkg/tool.py:4 imports pkg.high.view (type-only): tool.py may import low/ (made.md, Rooms)",
    ]


def test_the_rooms_check_fails_a_room_without_a_row_and_a_row_without_a_room(tmp_path):
    problems, unused = _made_up(tmp_path, {"pkg/extra/__init__.py": "", "pkg/extra/new.py": "from ..low import core\n"},
                                extra_row="| `gone/` | moved away | `low/` |\n")
    assert problems == [
        "pkg/extra/ has no row in made.md (Rooms): add one saying what it holds and which rooms it may import",
        "made.md:11: the row for gone/ names no room of pkg/",
    ]
    assert unused == ["made.md:11: gone/ may import low/, but no module of it does: drop it from the row"]


def test_the_rooms_table_is_read_strictly():
    rows = read_rooms(MADE_UP_DOC.format(extra_row=""), "made.md")
    assert rows["high/"].allowed == {"low/"} and rows["high/"].never == {"tool.py"} and rows["low/"].allowed == set()
    assert "elsewhere/" not in rows
    for row, complaint in [("| `odd/` | x | whatever |", "lists no room in backticks"),
                           ("| `odd/` | x | `handlers` |", "only room names go in backticks"),
                           ("| odd | x | nothing |", "the Room cell must be one name"),
                           ("| `low/` | again | nothing |", "a second row for low/")]:
        with pytest.raises(ValueError, match=complaint) as raised:
            read_rooms(MADE_UP_DOC.format(extra_row=row + "\n"), "made.md")
        assert "made.md:11:" in str(raised.value)


def test_a_finer_rule_names_what_breaks_it():
    rule = next(rule for rule in FINER_RULES if rule.name == "server-through-service")
    handler = Import("gpu_widgets.server.handlers", 7, "gpu_widgets.backends.base", "from ..backends import base",
                     True, "gpu_widgets/server/handlers.py")
    app = Import("gpu_widgets.server.app", 10, "gpu_widgets.backends", "from ..backends import CHOICES",
                 False, "gpu_widgets/server/app.py")
    assert rule.broken_by([handler, app]) == [handler]


# -- old import paths, and a cheap ``import gpu_widgets`` -----------------------------------------
def _run(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.integration
def test_old_import_paths_keep_working():
    out = _run(
        "import json\n"
        "from gpu_widgets import TrainingMonitor, GpuDashboard\n"
        "from gpu_widgets.sampler import Sampler\n"
        "from gpu_widgets.sampling.sampler import Sampler as Now\n"
        "from IPython.core.interactiveshell import InteractiveShell\n"
        "shell = InteractiveShell.instance()\n"
        "shell.run_line_magic('load_ext', 'gpu_widgets')\n"
        "magics = shell.magics_manager.magics\n"
        "print(json.dumps([TrainingMonitor.__name__, GpuDashboard.__name__, Sampler is Now,\n"
        "                  'gpuwatch' in magics['line'], 'gpuwatch' in magics['cell']]))\n"
    )
    assert json.loads(out.splitlines()[-1]) == ["TrainingMonitor", "GpuDashboard", True, True, True]


HEAVY = ["ipywidgets", "bqplot", "IPython", "pynvml", "numpy",
         "torch", "lightning", "pytorch_lightning", "transformers", "keras"]


@pytest.mark.integration
def test_import_gpu_widgets_stays_cheap():
    out = _run(
        "import json, sys\n"
        "import gpu_widgets\n"
        "import gpu_widgets.integrations\n"
        f"print(json.dumps([gpu_widgets.__version__, [m for m in {HEAVY!r} if m in sys.modules]]))\n"
    )
    version, loaded = json.loads(out.splitlines()[-1])
    assert version and loaded == [], f"import gpu_widgets loaded {loaded}"

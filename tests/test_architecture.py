"""The package's shape, checked: module sizes, who may import pynvml and the backends, no imports of a
package above, no cycles between siblings, and the old import paths. See docs/architecture.md.

Every check names its offenders (file, line, what it imports) so a failure says what to move.
"""
from __future__ import annotations

import ast
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "gpu_widgets"
TOP = "gpu_widgets"

MAX_MODULE_LINES = 400
MAX_MONITOR_LINES = 350  # TrainingMonitor's own module: a thin facade over its parts
MONITOR_MODULE = "gpu_widgets/monitor/monitor.py"
MAX_SOURCE_LINES = 400
GENERATED_BANNER = ("generated", "do not edit")
NVML_ROOM = "gpu_widgets.backends.nvml"
BACKENDS = "gpu_widgets.backends"


# -- the import graph, from the source (nothing is imported) --------------------------------------
@dataclass(frozen=True)
class Import:
    module: str  # the importing module, e.g. gpu_widgets.monitor.monitor
    line: int
    target: str  # the module it reaches: a submodule when the name is one, else the package itself
    text: str  # how it reads in the source, for messages
    type_only: bool  # under ``if TYPE_CHECKING:``: never runs

    def where(self) -> str:
        return f"{_path_of(self.module)}:{self.line} ({self.text})"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES: dict[str, Path] = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}
PACKAGES = {name for name, path in MODULES.items() if path.name == "__init__.py"}


def _path_of(module: str) -> str:
    return str(MODULES[module].relative_to(ROOT))


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _import_nodes(tree: ast.AST, type_only: bool = False):
    """Every import statement, inside functions and classes too, with whether it only runs for type checkers."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node, type_only
        elif isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.body:
                yield from _import_nodes(ast.Module(body=[child], type_ignores=[]), True)
            for child in node.orelse:
                yield from _import_nodes(ast.Module(body=[child], type_ignores=[]), type_only)
        else:
            yield from _import_nodes(node, type_only)


def _resolve(module: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    # A package's __init__ is its own package; a plain module's package is its parent.
    package = module if module in PACKAGES else module.rpartition(".")[0]
    parts = package.split(".")
    if node.level - 1 >= len(parts):
        raise AssertionError(f"{_path_of(module)}:{node.lineno}: relative import goes above {TOP}")
    base = ".".join(parts[: len(parts) - (node.level - 1)])
    return f"{base}.{node.module}" if node.module else base


def imports_of(module: str) -> list[Import]:
    source = MODULES[module].read_text()
    found = []
    for node, type_only in _import_nodes(ast.parse(source)):
        text = ast.get_source_segment(source, node) or ""
        if isinstance(node, ast.Import):
            found += [Import(module, node.lineno, alias.name, text, type_only) for alias in node.names]
            continue
        base = _resolve(module, node)
        for alias in node.names:
            sub = f"{base}.{alias.name}"
            found.append(Import(module, node.lineno, sub if sub in MODULES else base, text, type_only))
    return found


IMPORTS: list[Import] = [imp for module in MODULES for imp in imports_of(module)]


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


def _generated(path: Path) -> bool:
    head = "\n".join(path.read_text(errors="replace").splitlines()[:5]).lower()
    return any(word in head for word in GENERATED_BANNER)


def test_no_sidebar_source_is_over_400_lines_generated_files_aside():
    files = [p for p in sorted((ROOT / "labextension" / "src").rglob("*")) if p.is_file()]
    assert files, "labextension/src has no files"
    big = {str(p.relative_to(ROOT)): n for p in files if (n := _lines(p)) > MAX_SOURCE_LINES and not _generated(p)}
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


def test_widgets_magic_and_server_handlers_never_import_the_backends():
    def front(module: str) -> bool:
        return (_under(module, "gpu_widgets.widgets") or _under(module, "gpu_widgets.magic")
                or module == "gpu_widgets.server.handlers")

    assert "gpu_widgets.server.handlers" in MODULES
    bad = [imp.where() for imp in IMPORTS if front(imp.module) and _under(imp.target, BACKENDS)]
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


# -- old import paths, and a cheap ``import gpu_widgets`` -----------------------------------------
def _run(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


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


def test_import_gpu_widgets_stays_cheap():
    out = _run(
        "import json, sys\n"
        "import gpu_widgets\n"
        "import gpu_widgets.integrations\n"
        f"print(json.dumps([gpu_widgets.__version__, [m for m in {HEAVY!r} if m in sys.modules]]))\n"
    )
    version, loaded = json.loads(out.splitlines()[-1])
    assert version and loaded == [], f"import gpu_widgets loaded {loaded}"

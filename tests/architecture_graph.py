"""The import graph of a package, read from its source with ``ast`` (nothing is imported).

tests/test_architecture.py runs it on gpu_widgets/; the rooms check (architecture_rooms.py) also
runs it on a made-up package under tmp_path, so this takes the tree's root as an argument.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Import:
    module: str  # the importing module, e.g. gpu_widgets.monitor.monitor
    line: int
    target: str  # the module it reaches: a submodule when the name is one, else the package itself
    text: str  # how it reads in the source, for messages
    type_only: bool  # under ``if TYPE_CHECKING:``: never runs
    path: str = ""  # the importing file, relative to the tree's root (messages use it)
    by_name: bool = False  # a module named in a string (``importlib.import_module(...)``, a lazy table)

    def where(self) -> str:
        return f"{self.path or self.module}:{self.line} ({self.text})"


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


@dataclass
class Graph:
    """The modules under ``root/top`` and every import they make."""

    root: Path
    top: str
    modules: dict[str, Path] = field(default_factory=dict)
    packages: set[str] = field(default_factory=set)
    imports: list[Import] = field(default_factory=list)  # import statements only
    by_name: list[Import] = field(default_factory=list)  # string constants that name one of our modules

    def path_of(self, module: str) -> str:
        return self.modules[module].relative_to(self.root).as_posix()

    def module_name(self, path: Path) -> str:
        parts = list(path.relative_to(self.root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        return ".".join(parts)

    def resolve(self, module: str, node: ast.ImportFrom) -> str:
        if not node.level:
            return node.module or ""
        # A package's __init__ is its own package; a plain module's package is its parent.
        package = module if module in self.packages else module.rpartition(".")[0]
        parts = package.split(".")
        if node.level - 1 >= len(parts):
            raise AssertionError(f"{self.path_of(module)}:{node.lineno}: relative import goes above {self.top}")
        base = ".".join(parts[: len(parts) - (node.level - 1)])
        return f"{base}.{node.module}" if node.module else base

    def imports_of(self, module: str) -> tuple[list[Import], list[Import]]:
        source = self.modules[module].read_text()
        tree = ast.parse(source)
        path = self.path_of(module)
        found = []
        for node, type_only in _import_nodes(tree):
            text = ast.get_source_segment(source, node) or ""
            if isinstance(node, ast.Import):
                found += [Import(module, node.lineno, alias.name, text, type_only, path) for alias in node.names]
                continue
            base = self.resolve(module, node)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.append(Import(module, node.lineno, sub if sub in self.modules else base, text, type_only, path))
        # The package's lazy names (``_LAZY = {"TrainingMonitor": "gpu_widgets.monitor.monitor"}``) are
        # imports too, only later. The package's bare name is a name (loggers, labels), not an import;
        # a logger named after another room would count: rare, and harmless to list.
        named = [Import(module, node.lineno, node.value, repr(node.value), False, path, by_name=True)
                 for node in ast.walk(tree)
                 if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in self.modules
                 and node.value not in (module, self.top)]
        return found, named


def scan(root: Path, top: str) -> Graph:
    """The graph of the package ``top`` that lies in ``root/top``."""
    graph = Graph(root, top)
    for path in sorted((root / top).rglob("*.py")):
        graph.modules[graph.module_name(path)] = path
    graph.packages = {name for name, path in graph.modules.items() if path.name == "__init__.py"}
    for module in graph.modules:
        found, named = graph.imports_of(module)
        graph.imports += found
        graph.by_name += named
    return graph

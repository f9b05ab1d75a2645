"""Tell running monitors when the notebook cell that drove them ends, and how.

A loop written without ``with monitor:`` gives the monitor no chance to see its exception; IPython
does. After each cell, every monitor logged to during that cell learns the cell's outcome: an
exception marks it failed, a KeyboardInterrupt interrupted, and a clean end leaves it idle (its
threads stop until the next ``log()``). The user's exception is only read, never touched.
"""
from __future__ import annotations

import sys
import weakref
from typing import Any, Callable, Protocol


class CellAware(Protocol):
    def _cell_started(self) -> None: ...

    def _cell_ended(self, error: BaseException | None) -> None: ...


_watched: "weakref.WeakSet[Any]" = weakref.WeakSet()
_shells: "weakref.WeakSet[Any]" = weakref.WeakSet()
# Run after every watched object heard how the cell ended (the OOM post-mortem: a monitor whose
# loop the error left tells it first, with what it knows of the run).
_after: list[Callable[[Any], None]] = []


def _shell() -> Any | None:
    if "IPython" not in sys.modules:  # not running under IPython; do not import it
        return None
    from IPython import get_ipython

    return get_ipython()


def in_kernel() -> bool:
    """True in a Jupyter kernel (a front end may show widgets); False in plain (I)Python."""
    shell = _shell()
    return shell is not None and getattr(shell, "kernel", None) is not None


def _hook(shell: Any) -> None:
    if shell not in _shells:
        shell.events.register("pre_run_cell", _pre_run_cell)
        shell.events.register("post_run_cell", _post_run_cell)
        _shells.add(shell)


def watch(obj: CellAware) -> bool:
    """Follow cells for ``obj``; False when there is no IPython shell (plain Python)."""
    shell = _shell()
    if shell is None:
        return False
    _hook(shell)
    _watched.add(obj)
    return True


def after_cells(shell: Any, fn: Callable[[Any], None]) -> None:
    """Call ``fn(result)`` after each cell of ``shell``, once the watched objects have heard of it."""
    _hook(shell)
    if fn not in _after:
        _after.append(fn)


def stop_after_cells(fn: Callable[[Any], None]) -> None:
    if fn in _after:
        _after.remove(fn)


def unwatch(obj: CellAware) -> None:
    _watched.discard(obj)


def _pre_run_cell(*_: Any) -> None:
    for obj in list(_watched):
        try:
            obj._cell_started()
        except Exception:  # a hook must never break the user's cell
            pass


def _post_run_cell(result: Any = None) -> None:
    error = getattr(result, "error_in_exec", None)
    for obj in list(_watched):
        try:
            obj._cell_ended(error)
        except Exception:
            pass
    for fn in list(_after):
        try:
            fn(result)
        except Exception:
            pass

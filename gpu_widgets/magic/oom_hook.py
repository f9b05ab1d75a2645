"""With ``%load_ext gpu_widgets``, any cell that ends in a CUDA out-of-memory error gets its
post-mortem after the traceback (memory/postmortem_view.py), unless a monitor told it already.
Called after each cell once the monitors heard how it ended (cell_hooks.after_cells): the error
itself is IPython's, shown and kept as ever."""
from __future__ import annotations

from typing import Any


def after_cell(result: Any) -> None:
    exc = getattr(result, "error_in_exec", None)
    if exc is None or type(exc).__name__ != "OutOfMemoryError":  # cheap: nothing imported otherwise
        return
    from ..memory.postmortem_view import tell
    from ..widgets.cell_hooks import in_kernel

    tell(exc, in_kernel=in_kernel())


def register(ipython: Any) -> None:
    from ..widgets import cell_hooks

    cell_hooks.after_cells(ipython, after_cell)  # after the monitors: one whose loop it left tells it


def unregister(ipython: Any) -> None:
    from ..widgets import cell_hooks

    cell_hooks.stop_after_cells(after_cell)

"""With ``%load_ext gpu_widgets``, any cell that ends in a CUDA out-of-memory error gets its
post-mortem after the traceback (memory/postmortem_view.py), unless a monitor told it already.
An IPython ``post_run_cell`` callback: the error itself is IPython's, shown and kept as ever."""
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
    if after_cell not in ipython.events.callbacks.get("post_run_cell", ()):
        ipython.events.register("post_run_cell", after_cell)


def unregister(ipython: Any) -> None:
    if after_cell in ipython.events.callbacks.get("post_run_cell", ()):
        ipython.events.unregister("post_run_cell", after_cell)

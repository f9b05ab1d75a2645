"""``%gpuwatch`` / ``%%gpuwatch``: the IPython magic (``%load_ext gpu_widgets``)."""
from typing import Any


def load_ipython_extension(ipython: Any) -> None:
    from .magics import load_ipython_extension as load

    load(ipython)


def unload_ipython_extension(ipython: Any) -> None:
    from .magics import unload_ipython_extension as unload

    unload(ipython)

"""gpu-widgets: watch NVIDIA GPUs from Jupyter.

Importing this package is cheap: it touches neither NVML nor the widget stack. The widgets are
imported on first use (``from gpu_widgets import TrainingMonitor``), so the CLI and the server
extension never load ipywidgets, bqplot or IPython.
"""
from typing import Any

from ._version import __version__

__all__ = ["GpuDashboard", "PickGpusError", "RunFileError", "TrainingMonitor", "__version__", "analyze_trace",
           "free_gpu_memory", "launch", "pick_gpus", "show_memory_snapshot"]

# name -> module that defines it, imported lazily by __getattr__
_LAZY = {
    "TrainingMonitor": "gpu_widgets.monitor.monitor",
    "GpuDashboard": "gpu_widgets.widgets.dashboard",
    "RunFileError": "gpu_widgets.runs.run_files",  # what load() raises for a damaged file
    "pick_gpus": "gpu_widgets.pick",
    "PickGpusError": "gpu_widgets.pick",  # what pick_gpus() raises when it cannot choose
    "launch": "gpu_widgets.monitor.launcher",  # a torchrun job started from a notebook, followed there
    "analyze_trace": "gpu_widgets.profiling",  # why the GPU is not busy, from a torch.profiler trace
    "free_gpu_memory": "gpu_widgets.memory.freeing",  # what a failed cell keeps, given back
    "show_memory_snapshot": "gpu_widgets.memory.snapshot_view",  # where the memory went, drawn offline
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'gpu_widgets' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # next time: a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext gpu_widgets``: registers ``%gpuwatch`` / ``%%gpuwatch`` and ``%gpu_free``."""
    from .magic import load_ipython_extension as load

    load(ipython)


def unload_ipython_extension(ipython: Any) -> None:
    from .magic import unload_ipython_extension as unload

    unload(ipython)


def _jupyter_labextension_paths():
    # The prebuilt labextension ships inside the wheel (see pyproject.toml).
    return [{"src": "labextension", "dest": "gpu-widgets"}]


def _jupyter_server_extension_points():
    from .server.app import GpuWidgets  # imported only when a Jupyter server loads us

    return [{"module": "gpu_widgets", "app": GpuWidgets}]

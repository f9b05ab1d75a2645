"""gpu-widgets: watch NVIDIA GPUs from Jupyter.

Importing this package is cheap: it touches neither NVML nor the widget stack.
"""
from ._version import __version__

__all__ = ["__version__"]


def _jupyter_labextension_paths():
    # The prebuilt labextension ships inside the wheel (see pyproject.toml).
    return [{"src": "labextension", "dest": "gpu-widgets"}]


def _jupyter_server_extension_points():
    from .server.app import GpuWidgets  # imported only when a Jupyter server loads us

    return [{"module": "gpu_widgets", "app": GpuWidgets}]

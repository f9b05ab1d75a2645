"""The NVML layer: the only package that touches pynvml (see library.py)."""
from .backend import NvmlBackend
from .library import NVML, NoGpu

__all__ = ["NVML", "NoGpu", "NvmlBackend"]

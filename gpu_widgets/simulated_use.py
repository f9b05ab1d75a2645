"""Make this process show on the simulated GPUs, as if it held their memory: for demos and tests
where there is no CUDA (``GPU_WIDGETS_BACKEND=simulated``). On real GPUs it does nothing.

    from gpu_widgets.simulated_use import hold, release
    hold(0, 12 << 30)   # this kernel now holds 12 GiB on simulated GPU 0
    release()           # and lets go (it also ends with the process)
"""
from .backends.simulated_use import hold, release

__all__ = ["hold", "release"]

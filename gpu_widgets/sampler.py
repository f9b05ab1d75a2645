"""Old import path, kept for users: ``from gpu_widgets.sampler import Sampler``.

The sampler lives in :mod:`gpu_widgets.sampling.sampler`.
"""
from .sampling.sampler import *  # noqa: F401,F403
from .sampling.sampler import Sampler, get_sampler  # noqa: F401  (named for readers and linters)

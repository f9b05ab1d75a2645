"""Taking samples: the shared sampler and its clock, composing a snapshot from a backend,
CUDA_VISIBLE_DEVICES mapping, and noticing a sampler stuck in a driver call.

The modules are imported by name (``gpu_widgets.sampling.sampler``); nothing is imported here,
so the CLI can use ``stall`` without starting anything.
"""

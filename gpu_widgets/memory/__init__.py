"""Out of memory, answered in the notebook (docs/memory.md): the post-mortem of an OOM, memory a
failed cell keeps given back, and where the memory went (PyTorch's memory snapshot, drawn here).
Nothing is imported here: ``gpu_widgets.free_gpu_memory`` and ``show_memory_snapshot`` load their
module on first use."""

"""Callbacks that feed a TrainingMonitor from a training framework, one module per framework:

* ``gpu_widgets.integrations.lightning``: Lightning 2.x (``lightning.pytorch``, else ``pytorch_lightning``)
* ``gpu_widgets.integrations.transformers``: the Hugging Face ``Trainer`` (transformers 5.x)
* ``gpu_widgets.integrations.keras``: Keras 3, any backend

Each defines ``GpuWidgetsCallback``. This package imports nothing: a framework is loaded only when
its module is imported, so none of them is a dependency of gpu-widgets (see docs/integrations.md).
"""

"""The Prometheus export: the sampler's latest sample as a text exposition in dcgm-exporter's names.

``families`` turns a sample into metric families, ``exposition`` renders them with
prometheus-client on registries of its own (never the global one) and keeps one render per sample.
The Jupyter server serves it at ``{base_url}gpu-widgets/metrics`` and ``gpu-widgets exporter``
from a process of its own. Nothing here calls the driver: it reads what the sampler holds.
prometheus-client is imported by these modules only, never by ``import gpu_widgets``.
"""

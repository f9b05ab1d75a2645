"""The cluster view's server side: every host's GPUs, read back from a Prometheus.

Prometheus is asked in PromQL over dcgm-exporter's metric names only, so hosts exported by
gpu-widgets (each Jupyter server's ``/gpu-widgets/metrics``, ``gpu-widgets exporter``) and by
NVIDIA's dcgm-exporter show alike. ``promql`` writes the queries, ``prometheus`` sends them
without blocking the event loop, ``overview`` and ``detail`` turn the answers into the API's JSON,
and ``service`` caches one query round per refresh for every client. See docs/scale.md.
"""

"""The process-level GPU service: one sampler, and the answers built from it once per sample.

Shared by the Jupyter server extension (gpu_widgets/server/, which adds HTTP) and the
`gpu-widgets exporter` (gpu_widgets/cli/exporter.py, which has no Jupyter). Nothing here knows
about requests, handlers or jupyter_server; its parts are handed what they read (values or small
callables), never the service that owns them.
"""

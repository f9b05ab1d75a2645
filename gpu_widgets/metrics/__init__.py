"""The vocabulary every layer shares: the sample fields, the metric catalogue, throttle reasons.

Pure data and small pure functions; nothing here imports another part of gpu_widgets.
"""

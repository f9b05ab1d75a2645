"""The notebook widgets: TrainingMonitor, GpuDashboard and the pieces they share (views, header,
leases on the shared sampler, PyTorch probe). These modules import ipywidgets and bqplot;
nothing is imported here so that ``import gpu_widgets`` stays cheap.
"""

"""The notebook widgets' drawing kit and the GpuDashboard: chart views and cards (view,
chart_card, legend, ticks, theme), the header's pieces (header, gpu_cards, gpu_table,
gpu_summary), PNG pictures of a view, leases on the shared sampler and the PyTorch probe. The
TrainingMonitor (gpu_widgets.monitor) draws with this kit; nothing here imports it. These modules
import ipywidgets and bqplot; nothing is imported here so that ``import gpu_widgets`` stays cheap.
"""

"""Notebook side of gpu-widgets: the training monitor, the GPU dashboard and ``%gpuwatch``.

The widget modules (``monitor``, ``dashboard``, ``view``, ``magic``) import ipywidgets and bqplot;
the data modules (``records``, ``run_log``, ``run_files``, ``gpu_trace``, ``advice``) do not, so a
saved run can be read without the widget stack. Nothing is imported here for that reason.
"""

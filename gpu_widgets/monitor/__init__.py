"""The TrainingMonitor and its parts: the run it records (monitor_run, run_recording, run_state,
run_gpus, run_energy), its charts, header and alerts, the data-wait diagnosis and advice, its
static picture, following a run another process writes (follower) and comparing runs (compare).
It draws with the widgets' kit (gpu_widgets.widgets). Nothing is imported here so that
``import gpu_widgets`` stays cheap.
"""

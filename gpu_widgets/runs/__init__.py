"""A training run as data: logged values (records), the run log on disk, saved runs, the run's GPU trace.

No widget stack: a saved run can be read and exported without ipywidgets or bqplot.
"""

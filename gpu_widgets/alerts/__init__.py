"""Alerts decided on the server: rules over each sample, episodes told once, served to every tab.

``rules`` says which conditions hold in one snapshot, ``episodes`` turns them into episodes with
a start and an end, ``engine`` runs both once per sample (a sampler subscriber) and makes the
JSON the alerts endpoint serves, ``settings`` holds the server's traits. See docs/alerts.md.
"""
from .engine import AlertEngine
from .rules import KINDS, SEVERITY, KernelRef, Thresholds

__all__ = ["KINDS", "SEVERITY", "AlertEngine", "KernelRef", "Thresholds"]

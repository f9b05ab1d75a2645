"""Which host names the cluster view can list and open: one rule for the overview and the detail.

Prometheus takes any UTF-8 label value, so a host's name may have spaces around it, tabs,
newlines, control characters or an emoji: such a host is listed and opened by its exact name
(the queries quote it, promql.quote). Only a name the detail could not be asked for is left out
of the overview's rows (and counted there, never dropped in silence).
"""
from __future__ import annotations

# Far past a DNS name (253) or a Kubernetes node name; bounds the queries that carry it.
MAX_HOST_CHARS = 1024


def host_problem(name: str) -> str | None:
    """Why ``name`` cannot be a host of the view, in words; None when it can."""
    if not name:
        return "an empty host name"
    if len(name) > MAX_HOST_CHARS:
        return f"a host name of over {MAX_HOST_CHARS} characters"
    if any(0xD800 <= ord(c) <= 0xDFFF for c in name):  # only from a bad answer: UTF-8 cannot carry it
        return "a host name that is not Unicode text"
    return None

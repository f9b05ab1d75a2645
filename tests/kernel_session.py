"""A real Jupyter kernel for a test: started with the test's environment and folder, its client's
channels open and ready, and shut down (and cleaned up) however the test ends."""
from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest


@contextmanager
def running_kernel(env: Mapping[str, str], cwd: Path | str) -> Iterator[tuple[Any, Any]]:
    """(kernel manager, blocking client) of a fresh python3 kernel."""
    jupyter_client = pytest.importorskip("jupyter_client")
    km = jupyter_client.KernelManager(kernel_name="python3")
    km.start_kernel(env=dict(env), cwd=str(cwd))
    try:
        kc = km.client()
        kc.start_channels()
        try:
            kc.wait_for_ready(timeout=60)
            yield km, kc
        finally:
            kc.stop_channels()
    finally:
        km.shutdown_kernel(now=True)
        km.cleanup_resources()

"""``pytest --quick``: the unit-level tests only, the loop to run while editing.

A test is left out when it is marked ``integration`` (it starts a Jupyter server, a kernel, a
browser or another process). Tests that use the in-process Jupyter server (``jp_serverapp``, which
``jp_fetch`` needs) or a browser, and those marked ``browser`` or ``slow``, are marked here; the others that start something say so with
``pytestmark = pytest.mark.integration`` or the decorator. The marks are kept true by a guard: in
a quick run, starting a process fails the test with a message that names the mark, so a new
test that starts one cannot slip into the quick loop and make it slow.
"""
from __future__ import annotations

import contextlib
import os
import subprocess
import threading
from collections.abc import Iterator
from typing import Any

import pytest

# Fixtures that start something (the in-process server; a browser; JupyterLab as a subprocess).
STARTING_FIXTURES = frozenset({"jp_serverapp", "browser"})
# Marks that imply it (a browser test; one that takes tens of seconds).
STARTING_MARKS = ("browser", "slow")
_allowed = threading.local()
# Armed once collection is done: importing a test module (keras's import runs a process) is not
# the test's work.
_armed = {"on": False}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--quick", action="store_true",
                     help="run only the unit-level tests (no server, kernel, browser or process)")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "integration: starts a Jupyter server, a kernel, a browser or another process "
                   "(left out of `pytest --quick`)")
    if config.getoption("--quick"):
        _install_guard()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if STARTING_FIXTURES & set(getattr(item, "fixturenames", ())) or any(
                item.get_closest_marker(m) for m in STARTING_MARKS):
            item.add_marker(pytest.mark.integration)
    if not config.getoption("--quick"):
        return
    kept, left = [], []
    for item in items:
        (left if item.get_closest_marker("integration") else kept).append(item)
    if left:
        config.hook.pytest_deselected(items=left)
        items[:] = kept
    _armed["on"] = True


@contextlib.contextmanager
def processes_allowed() -> Iterator[None]:
    """Processes a quick run may start."""
    _allowed.on = True
    try:
        yield
    finally:
        _allowed.on = False


class StartedAProcess(RuntimeError):
    pass


def _refuse(what: str) -> None:
    if not _armed["on"] or getattr(_allowed, "on", False):
        return
    raise StartedAProcess(
        f"this test starts a process ({what}) in a quick run: mark it `@pytest.mark.integration` "
        "(or its module `pytestmark = pytest.mark.integration`) so that `pytest --quick` leaves it out")


def _install_guard() -> None:
    popen_init = subprocess.Popen.__init__

    def guarded_init(self: Any, args: Any, *rest: Any, **kwargs: Any) -> None:
        _refuse(f"{args!r}"[:120])
        popen_init(self, args, *rest, **kwargs)

    subprocess.Popen.__init__ = guarded_init  # type: ignore[method-assign]
    fork = os.fork

    def guarded_fork() -> int:
        _refuse("os.fork")
        return fork()

    os.fork = guarded_fork
    # The fake NVML library's compile (once, cached) is the loop's own set-up, not the test's work.
    from . import fake_nvml

    build = fake_nvml.build_fake_nvml

    def build_allowed(*args: Any, **kwargs: Any) -> Any:
        with processes_allowed():
            return build(*args, **kwargs)

    fake_nvml.build_fake_nvml = build_allowed

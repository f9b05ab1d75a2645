"""Whose GPU processes are shown, and what of them: identity by real uid, bounded command lines.

Issue 10, items 1, 2 and 8: a uid without a passwd entry (arbitrary-uid containers) must work
everywhere; ``$USER``/``$LOGNAME`` must not decide whose processes are shown; a command line goes
out readable and at most 4 KB.
"""
from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import time

import psutil
import pytest

from gpu_widgets.backends.processes import COMMAND_MAX_BYTES, ProcessDescriber, capped_command

from .api_schema import validate_response
from .fake_nvml import fake_nvml_env
from .lab_server import LabServer
from .test_server_api import get_json, wait_for

GIB = 1 << 30
UNKNOWN_UID = 4242
USER_VARIABLES = ("USER", "LOGNAME", "LNAME", "USERNAME")  # what getpass.getuser() reads
NVML_SERVER = {"backend": "nvml", "interval_s": 0.1, "slow_interval_s": 0.1}
ONE_GPU = {"gpus": [{"util_gpu": 50}]}
SLEEP = "import time; time.sleep(120)"


def _passwd_entry(uid: int) -> str | None:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return None


@pytest.fixture(scope="module")
def as_unknown_uid() -> list[str]:
    """A command prefix that runs a command as uid 4242 (no passwd entry) with no USER or LOGNAME:
    a user namespace, which root and (where the kernel allows) any user can make. There, processes of
    the caller's uid show as 4242 too; other uids show as the overflow uid 65534."""
    if _passwd_entry(UNKNOWN_UID) is not None:
        pytest.skip(f"uid {UNKNOWN_UID} has a passwd entry on this machine")
    unshare = shutil.which("unshare")
    if unshare is None:
        pytest.skip("no unshare(1) here to make a user namespace")
    prefix = ["env", *(f"--unset={v}" for v in USER_VARIABLES),
              unshare, "--user", f"--map-user={UNKNOWN_UID}", f"--map-group={UNKNOWN_UID}"]
    probe = subprocess.run([*prefix, sys.executable, "-c", "import os; print(os.getuid())"],
                           capture_output=True, text=True, timeout=30)
    if probe.returncode != 0 or probe.stdout.strip() != str(UNKNOWN_UID):
        pytest.skip(f"this machine does not allow user namespaces: {probe.stderr.strip()}")
    return prefix


def _started(proc: subprocess.Popen) -> subprocess.Popen:
    """``proc`` once its command line is readable: Popen returns while exec may still be filling it in."""
    deadline = time.monotonic() + 10
    while not psutil.Process(proc.pid).cmdline():
        assert time.monotonic() < deadline, "the child never showed a command line"
        time.sleep(0.01)
    return proc


def _sleeper(*args: str | bytes) -> subprocess.Popen:
    return _started(subprocess.Popen([sys.executable, "-c", SLEEP, *args]))


def _nobodys_sleeper() -> subprocess.Popen | None:
    """A process of uid 65534 (nobody), where we may start one (as root)."""
    if os.geteuid() != 0:
        return None
    return subprocess.Popen(["sleep", "120"], user=65534, group=65534, extra_groups=[])


def _stop(proc: subprocess.Popen | None) -> None:
    if proc is not None:
        proc.kill()
        proc.wait()


@pytest.fixture
def others_process():
    """(pid, user name) of a process owned by another uid: a sleeper run as nobody when we are root,
    else any process of another uid on the machine."""
    proc = _nobodys_sleeper()
    if proc is not None:
        try:
            yield proc.pid, _passwd_entry(65534) or "65534"
        finally:
            _stop(proc)
        return
    for p in psutil.process_iter(["uids", "username"]):
        if p.info["uids"] is not None and p.info["uids"].real != os.getuid():
            yield p.pid, p.info["username"]
            return
    pytest.skip("no process of another uid to show")


def _procs(body: dict) -> dict[int, dict]:
    return {p["pid"]: p for d in body["devices"] for p in d["processes"] or ()}


# -- 1. a uid without a passwd entry -------------------------------------------------------------

@pytest.mark.integration
def test_a_server_running_as_a_uid_without_a_passwd_entry_answers_every_route(as_unknown_uid, fake_driver,
                                                                               tmp_path):
    # Given a real Jupyter server running as uid 4242, with no passwd entry, USER or LOGNAME,
    # reading the fake driver, and (when we can make one) a process of another uid on the GPU
    fake_driver.write(ONE_GPU)
    other = _nobodys_sleeper()
    env = {**fake_nvml_env(fake_driver.lib_dir, fake_driver.config_path), "GPU_WIDGETS_BACKEND": "nvml",
           "HOME": str(tmp_path / "home")}
    try:
        with LabServer(workdir=tmp_path / "lab", env=env, command_prefix=as_unknown_uid,
                       args=["--GpuWidgets.interval_s=0.1", "--GpuWidgets.slow_interval_s=0.1"]) as lab:
            assert lab.proc is not None
            pids = [lab.proc.pid] + ([other.pid] if other else [])
            fake_driver.write({"gpus": [{"util_gpu": 50, "procs": [(pid, GIB) for pid in pids]}]})
            # When every route is asked (urlopen raises on anything but 2xx)
            deadline = time.monotonic() + 30
            while len(_procs(latest := lab.api("samples/latest"))) < len(pids):
                assert time.monotonic() < deadline, f"processes never listed: {latest}\n{lab.log_tail()}"
                time.sleep(0.2)
            listed = lab.api("processes")
            for route in ("status", "devices", "samples", "openapi.json"):
                lab.api(route)
            log = lab.log_tail(100_000)
    finally:
        _stop(other)
    # Then the server's own process is shown in full, under its uid, and another uid's is hidden
    validate_response("/samples/latest", latest)
    validate_response("/processes", listed)
    for body in (latest, listed):
        mine = _procs(body)[pids[0]]
        assert (mine["uid"], mine["user"]) == (UNKNOWN_UID, str(UNKNOWN_UID)), mine
        assert "jupyter" in mine["command"] and mine["name"], mine
        if other is not None:
            theirs = _procs(body)[other.pid]
            assert theirs["uid"] is None and theirs["user"] is None and theirs["command"] is None
            assert "another user" in theirs["unavailable"]["command"]
    assert "Traceback" not in log, log[-4000:]


@pytest.fixture
def no_passwd_entry(monkeypatch: pytest.MonkeyPatch) -> None:
    """This process's uid looked up in the passwd database fails, as in an arbitrary-uid container."""
    for var in USER_VARIABLES:
        monkeypatch.delenv(var, raising=False)

    def missing(uid: int):
        raise KeyError(f"getpwuid(): uid not found: {uid}")

    monkeypatch.setattr(pwd, "getpwuid", missing)


@pytest.mark.parametrize("gw_config,fake_nvml_config", [(NVML_SERVER, ONE_GPU)])
async def test_without_a_passwd_entry_the_process_routes_answer_200(no_passwd_entry, in_process_fake_nvml,
                                                                     jp_fetch):
    # Given the uid lookup fails and no USER/LOGNAME is set, and this server's process is on the GPU
    in_process_fake_nvml({"gpus": [{"util_gpu": 50, "procs": [(os.getpid(), GIB)]}]})
    # When the routes that carry processes are asked
    latest = await wait_for(jp_fetch, lambda b: _procs(b), path=("samples", "latest"))
    listed = await get_json(jp_fetch, "processes")
    # Then both answer, and the process shows under its uid (as text, for want of a name)
    for path, body in (("/samples/latest", latest), ("/processes", listed)):
        validate_response(path, body)
        mine = _procs(body)[os.getpid()]
        assert (mine["uid"], mine["user"]) == (os.getuid(), str(os.getuid())) and mine["command"], mine


@pytest.mark.integration
def test_the_cli_works_as_a_uid_without_a_passwd_entry(as_unknown_uid, fake_driver):
    # Given a GPU process owned (inside the namespace) by uid 4242, which has no passwd entry
    sleeper = _sleeper()
    try:
        fake_driver.write({"gpus": [{"util_gpu": 50, "procs": [(sleeper.pid, GIB)]}]})
        cli = [*as_unknown_uid, sys.executable, "-m", "gpu_widgets.cli", "snapshot"]
        # When the CLI runs as that uid, on the driver and on the simulated GPUs
        as_json = subprocess.run([*cli, "--json", "--backend", "nvml"], env=fake_driver.env(),
                                 capture_output=True, text=True, timeout=60)
        table = subprocess.run([*cli, "--backend", "nvml"], env=fake_driver.env(),
                               capture_output=True, text=True, timeout=60)
        simulated = subprocess.run([*cli, "--json", "--backend", "simulated"], env=fake_driver.env(),
                                   capture_output=True, text=True, timeout=60)
    finally:
        _stop(sleeper)
    # Then each exits 0 and names the owner by its uid
    for out in (as_json, table, simulated):
        assert out.returncode == 0, out.stderr
    proc = _procs(json.loads(as_json.stdout))[sleeper.pid]
    assert (proc["uid"], proc["user"]) == (UNKNOWN_UID, str(UNKNOWN_UID)) and SLEEP in proc["command"]
    assert f"pid {sleeper.pid}" in table.stdout and f" {UNKNOWN_UID} " in table.stdout, table.stdout
    own = [p for p in _procs(json.loads(simulated.stdout)).values() if p["uid"] == UNKNOWN_UID]
    assert own and all(p["user"] == str(UNKNOWN_UID) for p in own), simulated.stdout


# -- 2. identity is the real uid, not $USER -------------------------------------------------------

@pytest.mark.parametrize("gw_config,fake_nvml_config", [(NVML_SERVER, ONE_GPU)])
async def test_user_variables_do_not_change_whose_processes_are_shown(others_process, monkeypatch,
                                                                       in_process_fake_nvml, jp_fetch):
    # Given a server whose USER and LOGNAME name the owner of another uid's GPU process
    other_pid, other_name = others_process
    for var in USER_VARIABLES:
        monkeypatch.setenv(var, other_name)
    in_process_fake_nvml({"gpus": [{"util_gpu": 50, "procs": [(os.getpid(), GIB), (other_pid, GIB)]}]})
    # When the routes that carry processes are asked
    latest = await wait_for(jp_fetch, lambda b: len(_procs(b)) == 2, path=("samples", "latest"))
    listed = await get_json(jp_fetch, "processes")
    # Then the server's own process is shown and the other uid's is hidden, whatever USER says
    for body in (latest, listed):
        mine, theirs = _procs(body)[os.getpid()], _procs(body)[other_pid]
        assert mine["command"] and theirs["command"] is None, (mine, theirs)
        assert mine["uid"] == os.getuid() and mine["user"] == psutil.Process().username()
        assert theirs["user"] is None and theirs["uid"] is None and "another user" in theirs["unavailable"]["command"]


# -- 8. command lines: bounded and readable -------------------------------------------------------

@pytest.fixture
def long_argv():
    """A live process whose argv has invalid UTF-8 and is 120 KB long; yields (pid, its command line's bytes)."""
    argv = [os.fsencode(sys.executable), b"-c", SLEEP.encode(), b"--label=caf\xe9\xff", b"x" * 120_000]
    proc = _started(subprocess.Popen(argv))
    try:
        yield proc.pid, b" ".join(argv)
    finally:
        _stop(proc)


def _assert_cut_and_readable(command: str, raw: bytes) -> None:
    encoded = command.encode("utf-8")  # strict: raises on a lone surrogate
    assert len(encoded) <= COMMAND_MAX_BYTES
    assert command.startswith(f"{sys.executable} -c {SLEEP} --label=caf\ufffd\ufffd xxxx")
    assert command.endswith(f"xxx… (cut: {len(raw)} bytes in all)")


@pytest.mark.integration
def test_a_long_command_line_is_cut_to_4_kb_marked_and_readable(long_argv):
    pid, raw = long_argv
    _assert_cut_and_readable(ProcessDescriber().describe(pid)["command"], raw)


@pytest.mark.integration
def test_invalid_utf8_in_a_short_command_line_becomes_replacement_characters():
    proc = _sleeper(b"--token=\xff\xfeok")
    try:
        command = ProcessDescriber().describe(proc.pid)
    finally:
        _stop(proc)
    assert command["command"] == f"{sys.executable} -c {SLEEP} --token=\ufffd\ufffdok", command


def test_the_cut_keeps_whole_characters_and_spares_a_command_at_the_limit():
    assert capped_command(["a" * COMMAND_MAX_BYTES]) == "a" * COMMAND_MAX_BYTES
    cut = capped_command(["a" * (COMMAND_MAX_BYTES + 1)])
    assert len(cut.encode()) <= COMMAND_MAX_BYTES and cut.endswith(f"… (cut: {COMMAND_MAX_BYTES + 1} bytes in all)")
    wide = capped_command(["é" * 3000])  # 2 bytes each: the cut falls inside one unless it is careful
    head, mark = wide.split("…")
    assert set(head) == {"é"} and mark == " (cut: 6000 bytes in all)"
    assert COMMAND_MAX_BYTES - 1 <= len(wide.encode()) <= COMMAND_MAX_BYTES


@pytest.mark.parametrize("gw_config,fake_nvml_config", [(NVML_SERVER, ONE_GPU)])
async def test_the_api_sends_a_long_command_line_cut_and_as_valid_utf8(long_argv, in_process_fake_nvml, jp_fetch):
    pid, raw = long_argv
    in_process_fake_nvml({"gpus": [{"util_gpu": 50, "procs": [(pid, GIB)]}]})
    await wait_for(jp_fetch, lambda b: _procs(b), path=("samples", "latest"))
    for path in (("samples", "latest"), ("processes",)):
        body = (await jp_fetch("gpu-widgets", "api", "v1", *path)).body
        assert len(body) < 3 * COMMAND_MAX_BYTES and b"\\ud" not in body  # no escaped lone surrogates
        _assert_cut_and_readable(_procs(json.loads(body.decode("utf-8")))[pid]["command"], raw)

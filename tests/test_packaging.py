"""Packaging checks.

* the Python and npm versions agree, and the labextension name is the same everywhere;
* the sdist carries what a from-scratch build needs (TypeScript sources, package.json,
  yarn.lock, ...) and no node_modules;
* the wheel built FROM that sdist (fresh `jlpm install` + production build, as on PyPI)
  ships the labextension exactly once under share/jupyter/labextensions, install.json,
  and the jupyter_server config file that enables the server extension;
* in the development venv, JupyterLab and jupyter_server report both extensions enabled/OK.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

import gpu_widgets

ROOT = Path(__file__).resolve().parents[1]
# The venv's executables (jupyter, ...), whichever venv runs the tests.
BIN = Path(sys.executable).parent
NPM_NAME = "gpu-widgets"
LABEXT_DIR = f"share/jupyter/labextensions/{NPM_NAME}"
SERVER_CONFIG = "etc/jupyter/jupyter_server_config.d/gpu_widgets.json"
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _package_json() -> dict:
    return json.loads((ROOT / "package.json").read_text())


def _run(cmd: list[str], **kwargs) -> str:
    """Run cmd, fail the test with its output when it fails; return stdout+stderr."""
    proc = subprocess.run(
        [str(c) for c in cmd],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        **kwargs,
    )
    assert proc.returncode == 0, f"{cmd} exited {proc.returncode}:\n{proc.stdout[-6000:]}"
    return ANSI.sub("", proc.stdout)


# --------------------------------------------------------------------------- versions


def test_python_version_equals_package_json_version():
    assert gpu_widgets.__version__ == _package_json()["version"]


def test_labextension_names_agree():
    pkg = _package_json()
    assert pkg["name"] == NPM_NAME
    assert pkg["jupyterlab"]["outputDir"] == "gpu_widgets/labextension"
    # The dev-mode link and the wheel's shared-data both use the npm name as folder.
    (path,) = gpu_widgets._jupyter_labextension_paths()
    assert path == {"src": "labextension", "dest": NPM_NAME}
    install = json.loads((ROOT / "install.json").read_text())
    assert install["packageName"] == NPM_NAME
    assert install["packageManager"] == "python"


# --------------------------------------------------------------------------- sdist + wheel


@pytest.fixture(scope="module")
def sdist(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("sdist")
    # The sdist needs no built JS: skip the build hook so the working tree stays untouched.
    env = dict(os.environ, SKIP_JUPYTER_BUILDER="1")
    _run([sys.executable, "-m", "hatchling", "build", "-t", "sdist", "-d", out], cwd=ROOT, env=env)
    (path,) = out.glob("gpu_widgets-*.tar.gz")
    return path


@pytest.fixture(scope="module")
def wheel(sdist, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    # From the sdist: pip unpacks it in a fresh directory (no node_modules, no prebuilt
    # labextension) and the build hook runs `jlpm install` + `jlpm build:prod` there.
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", out, sdist])
    (path,) = out.glob("gpu_widgets-*.whl")
    return path


@pytest.mark.integration
@pytest.mark.slow
def test_sdist_has_sources_for_a_fresh_build(sdist):
    with tarfile.open(sdist) as tar:
        names = tar.getnames()
    top = names[0].split("/")[0]
    rel = {n[len(top) + 1 :] for n in names if "/" in n}
    for needed in [
        "pyproject.toml",
        "package.json",
        "yarn.lock",
        ".yarnrc.yml",
        "tsconfig.json",
        "install.json",
        "jupyter-config/server-config/gpu_widgets.json",
        "labextension/src/index.ts",
        "labextension/style/index.css",
        "labextension/style/index.js",
        "labextension/schema/plugin.json",
        "gpu_widgets/__init__.py",
        "gpu_widgets/_version.py",
    ]:
        assert needed in rel, f"{needed} missing from the sdist"
    for bad in ("node_modules/", ".venv/", "gpu_widgets/labextension/", "labextension/lib/"):
        offenders = [n for n in rel if n.startswith(bad) or f"/{bad}" in n]
        assert not offenders, f"sdist must not contain {bad}: {offenders[:5]}"


# Directories of test and build state a working tree collects (pytest, Hypothesis/schemathesis,
# `make lab`, builds, npm); none belongs in the sdist, whether .gitignore names it or not.
STATE_DIRS = (".hypothesis", "tests/.hypothesis", ".pytest_cache", "tests/.pytest_cache", ".lab/examples",
              "build/lib", "dist", "node_modules/x", "labextension/node_modules/x", "tests/__pycache__",
              "gpu_widgets/__pycache__", "examples/.ipynb_checkpoints", "tests/fake_nvml/build", "gpu_widgets.egg-info")
HEAVY = {".git", ".venv", "node_modules", ".yarn", "labextension", "build", "dist"}  # not needed by the check


@pytest.mark.integration
def test_sdist_leaves_out_test_and_build_state(tmp_path):
    """A copy of the tree with state planted everywhere and no .gitignore: pyproject.toml alone
    keeps it out of the sdist."""
    src = tmp_path / "src"
    shutil.copytree(ROOT, src, ignore=lambda d, names: [n for n in names if Path(d) == ROOT and n in HEAVY])
    (src / ".gitignore").unlink(missing_ok=True)
    shutil.copytree(ROOT / "labextension" / "src", src / "labextension" / "src")
    for rel in STATE_DIRS:
        (src / rel).mkdir(parents=True, exist_ok=True)
        (src / rel / "state.txt").write_text("state")
    (src / "tests" / "__pycache__" / "x.cpython-312.pyc").write_bytes(b"\0")
    out = tmp_path / "out"
    _run([sys.executable, "-m", "hatchling", "build", "-t", "sdist", "-d", out], cwd=src,
         env=dict(os.environ, SKIP_JUPYTER_BUILDER="1"))
    (path,) = out.glob("gpu_widgets-*.tar.gz")
    with tarfile.open(path) as tar:
        rel = [n.split("/", 1)[1] for n in tar.getnames() if "/" in n]
    assert "labextension/src/index.ts" in rel and "tests/conftest.py" in rel  # the sources still go
    for state in STATE_DIRS:
        top = state.split("/x")[0]
        offenders = [n for n in rel if n == top or n.startswith(top + "/")]
        assert not offenders, f"the sdist must not contain {top}: {offenders[:5]}"
    assert not [n for n in rel if n.endswith(".pyc")]


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_wheel_ships_labextension_once_and_enables_server_extension(wheel):
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        data = f"gpu_widgets-{gpu_widgets.__version__}.data/data/"

        def read(rel: str) -> str:
            return zf.read(data + rel).decode()

        # The labextension: package.json, federated JS, settings schema, install.json.
        built = json.loads(read(f"{LABEXT_DIR}/package.json"))
        assert built["name"] == NPM_NAME
        assert built["version"] == gpu_widgets.__version__
        assert "_build" in built["jupyterlab"], "not a built labextension package.json"
        static = [n for n in names if n.startswith(f"{data}{LABEXT_DIR}/static/")]
        js = [n for n in static if n.endswith(".js")]
        assert any("/remoteEntry." in n for n in js), static
        assert f"{data}{LABEXT_DIR}/static/style.js" in names
        # Production build (from the sdist): no source maps.
        assert not [n for n in static if n.endswith(".map")], static
        schema = json.loads(read(f"{LABEXT_DIR}/schemas/{NPM_NAME}/plugin.json"))
        assert schema["properties"]["refreshIntervalMs"]["default"] == 1000
        install = json.loads(read(f"{LABEXT_DIR}/install.json"))
        assert install["packageName"] == NPM_NAME

        # The server extension is enabled by the config file jupyter_server reads.
        assert json.loads(read(SERVER_CONFIG)) == {
            "ServerApp": {"jpserver_extensions": {"gpu_widgets": True}}
        }

        # Exactly one copy of the labextension: not also inside the Python package.
        assert not [n for n in names if n.startswith("gpu_widgets/labextension/")]
        assert [n for n in names if n.endswith("/static/style.js")] == [
            f"{data}{LABEXT_DIR}/static/style.js"
        ]

        # The package itself and the console script.
        assert "gpu_widgets/__init__.py" in names
        dist_info = f"gpu_widgets-{gpu_widgets.__version__}.dist-info/"
        entry_points = zf.read(dist_info + "entry_points.txt").decode()
        assert re.search(r"^gpu-widgets\s*=\s*gpu_widgets\.cli:main\s*$", entry_points, re.M)
        metadata = zf.read(dist_info + "METADATA").decode()
        assert "Requires-Dist: nvidia-ml-py>=12.535" in metadata
        assert "Requires-Python: >=3.10" in metadata


# --------------------------------------------------------------------------- dev venv


@pytest.mark.integration
def test_labextension_enabled_in_dev_venv():
    out = _run([BIN / "jupyter", "labextension", "list"])
    line = next((l for l in out.splitlines() if re.match(rf"\s*{NPM_NAME}\s", l)), None)
    assert line is not None, f"{NPM_NAME} not listed:\n{out}"
    assert f"v{gpu_widgets.__version__}" in line, line
    assert re.search(r"\benabled\b", line) and re.search(r"\bOK\b", line), line


@pytest.mark.integration
def test_server_extension_enabled_in_dev_venv():
    out = _run([BIN / "jupyter", "server", "extension", "list"])
    assert re.search(r"^\s*gpu_widgets\s+enabled\b", out, re.M), out
    assert re.search(r"^\s*gpu_widgets\s+.*\bOK\b", out, re.M), out

"""The wheel: one top-level package (`rsc`), no bench/ or tests/, and it works installed.

`pip wheel . --no-deps` builds it; a fresh venv (no system site-packages, so a missing
dependency cannot hide) installs it with its dependencies, and `rsc demo --duration 10`
runs from a directory outside the checkout.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from rsc import __version__

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "--quiet",
                    "--wheel-dir", str(out)], check=True, timeout=300,
                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    [built] = out.glob("*.whl")
    return built


def test_the_wheel_holds_one_top_level_package(wheel: Path):
    names = zipfile.ZipFile(wheel).namelist()
    top = {name.split("/", 1)[0] for name in names}
    assert top == {"rsc", f"redis_stream_coordinator-{__version__}.dist-info"}
    for part in ("protocol", "actors", "member"):
        assert f"rsc/{part}/__init__.py" in names, part
    assert not [name for name in names if "/bench/" in name or "/tests/" in name
                or name.startswith(("bench/", "tests/"))]
    assert "rsc/admin/views.py" in names and "rsc/commands/demo.py" in names
    assert "rsc/common/scripts/ack.lua" in names  # the Lua scripts are package data


def test_the_wheel_metadata_names_version_license_and_urls(wheel: Path):
    archive = zipfile.ZipFile(wheel)
    metadata = archive.read(f"redis_stream_coordinator-{__version__}.dist-info/METADATA").decode()
    assert f"Version: {__version__}" in metadata
    # `License:` (not only License-Expression) so that `pip show` of every pip prints it
    assert "License: MIT" in metadata.splitlines()
    assert "Classifier: Framework :: Trio" in metadata
    assert "Classifier: Programming Language :: Python :: 3.11" in metadata
    assert "Classifier: License :: OSI Approved :: MIT License" in metadata
    assert "Project-URL: Homepage," in metadata
    entry_points = archive.read(
        f"redis_stream_coordinator-{__version__}.dist-info/entry_points.txt").decode()
    assert "rsc = rsc.cli:main" in entry_points


@pytest.mark.slow
def test_installed_wheel_runs_the_demo_from_another_directory(wheel: Path, tmp_path: Path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    env = {key: value for key, value in os.environ.items()
           if key not in ("PYTHONPATH", "VIRTUAL_ENV") and not key.startswith("RSC_")}
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", str(wheel)], check=True,
                   timeout=600, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    version = subprocess.run([str(venv / "bin" / "rsc"), "--version"], cwd=elsewhere, env=env,
                             capture_output=True, text=True, timeout=60)
    assert version.stdout.strip() == f"rsc {__version__}"
    where = subprocess.run([str(python), "-c", "import rsc; print(rsc.__file__)"], cwd=elsewhere,
                           env=env, capture_output=True, text=True, timeout=60)
    assert str(venv) in where.stdout, "the installed package, not the checkout"
    # the fresh venv's own pip (the one the README installs with) shows the license
    shown = subprocess.run([str(python), "-m", "pip", "show", "redis-stream-coordinator"],
                           env=env, capture_output=True, text=True, timeout=60)
    assert "License: MIT" in shown.stdout.splitlines(), shown.stdout
    demo = subprocess.run([str(venv / "bin" / "rsc"), "demo", "--duration", "10"], cwd=elsewhere,
                          env={**env, "COLUMNS": "200"}, capture_output=True, text=True,
                          timeout=120)
    assert demo.returncode == 0, demo.stderr
    assert "stopped cleanly: produced" in demo.stdout

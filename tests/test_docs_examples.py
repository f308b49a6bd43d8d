"""Every `python` and `bash` block of README.md and docs/**/*.md runs, so examples cannot rot.

Each block is its own test (id `FILE:LINE`, the line of its opening fence): a `python` block
runs as a program, a `bash` block with `bash -euo pipefail`, in a temporary directory, with
RSC_COORDINATOR_URL and RSC_REDIS_URL pointing at a fresh coordinator (short ticks, a 6 s
lease) on the test's flushed redis-server, the venv's bin first on PATH, for at most 60 s;
it must exit 0. Whatever a block leaves running (a server sent to the background) is ended
with it: each block runs in a process group of its own. A block whose only line is a
pymdownx.snippets include (`--8<-- "docs/examples/FILE"`) is skipped: that file has a test
of its own. Output, JSON, YAML and fragments use other tags (`text`, `json`, `yaml`, ...).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import attrs
import pytest
import trio

ROOT = Path(__file__).resolve().parent.parent
RUN_TAGS = ("python", "bash")
LIMIT_S = 60.0
_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})\s*(?P<info>[^`]*)$")
_INCLUDE = re.compile(r"""^-{1,2}8<-{1,2}\s+["'][^"']+["']$""")


@attrs.frozen
class Block:
    path: Path
    line: int  # of the opening fence, 1-based
    tag: str
    code: str

    @property
    def name(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"

    @property
    def is_include(self) -> bool:
        lines = [line.strip() for line in self.code.splitlines() if line.strip()]
        return len(lines) == 1 and bool(_INCLUDE.match(lines[0]))


def fenced_blocks(path: Path) -> list[Block]:
    """Every fenced block of a Markdown file (indented ones inside lists too)."""
    blocks = []
    lines = path.read_text(encoding="utf-8").splitlines()
    index = 0
    while index < len(lines):
        opening = _FENCE.match(lines[index])
        if not opening or not opening["info"].strip():
            index += 1
            continue
        fence, indent = opening["fence"], len(opening["indent"])
        tag = opening["info"].strip().split()[0].lstrip(".{").rstrip("}").lower()
        body = []
        index += 1
        while index < len(lines):
            closing = _FENCE.match(lines[index])
            if (closing and closing["fence"][0] == fence[0] and len(closing["fence"]) >= len(fence)
                    and not closing["info"].strip()):
                break
            text = lines[index]
            body.append(text[indent:] if text[:indent].strip() == "" else text)
            index += 1
        blocks.append(Block(path, index - len(body), tag, textwrap.dedent("\n".join(body)) + "\n"))
        index += 1
    return blocks


def doc_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def runnable_blocks() -> list[Block]:
    return [block for path in doc_files() for block in fenced_blocks(path)
            if block.tag in RUN_TAGS and not block.is_include]


def test_the_collector_finds_blocks_and_their_lines(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("intro\n\n```bash\necho one\n```\n\n- item\n\n    ```python\n    print(2)\n"
                    "    ```\n\n````text\n```bash\nnot run\n```\n````\n\n```bash\n"
                    '--8<-- "docs/examples/server.py"\n```\n', encoding="utf-8")
    found = [(block.line, block.tag, block.code, block.is_include) for block in fenced_blocks(page)]
    assert found == [(3, "bash", "echo one\n", False), (9, "python", "print(2)\n", False),
                     (13, "text", "```bash\nnot run\n```\n", False),
                     (19, "bash", '--8<-- "docs/examples/server.py"\n', True)]


def test_the_readme_and_the_docs_have_runnable_examples():
    names = [block.name for block in runnable_blocks()]
    assert any(name.startswith("README.md:") for name in names)
    assert any(name.startswith("docs/") for name in names)


def _environment(coordinator_url: str, redis_url: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items()
           if not key.startswith("RSC_") and key not in ("PYTHONPATH",)}
    venv_bin = str(Path(sys.executable).parent)
    env.update(RSC_COORDINATOR_URL=coordinator_url, RSC_REDIS_URL=redis_url,
               PATH=f"{venv_bin}{os.pathsep}{env.get('PATH', '')}", PYTHONUNBUFFERED="1",
               COLUMNS="100", RSC_GC=os.environ.get("RSC_GC", "tuned"))
    return env


# the short ticks and heartbeats of the other tests, with a 6 s lease: the store deadline (D4, a
# third of the lease) is then 2 s, so a loaded machine's slow store call is not an answer
# COORDINATOR_NOT_AVAILABLE to an example's one-shot `rsc admin` (nothing here times leases)
LEASE_MS = 6000


@pytest.mark.parametrize("block", runnable_blocks(), ids=lambda block: block.name)
async def test_docs_example_runs(block: Block, coordinator_factory, tmp_path):
    coordinator = await coordinator_factory(lease_ttl_ms=LEASE_MS)
    script = tmp_path / ("example.py" if block.tag == "python" else "example.sh")
    script.write_text(block.code, encoding="utf-8")
    command = ([sys.executable, str(script)] if block.tag == "python"
               else ["bash", "-euo", "pipefail", str(script)])
    work = tmp_path / "cwd"
    work.mkdir()
    out_path, err_path = tmp_path / "stdout", tmp_path / "stderr"
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        # files, not pipes: a server the block leaves in the background cannot hold them open
        process = await trio.lowlevel.open_process(
            command, cwd=work, env=_environment(coordinator.url, coordinator.redis_url),
            stdin=subprocess.DEVNULL, stdout=out, stderr=err, start_new_session=True)
        try:
            with trio.move_on_after(LIMIT_S):
                await process.wait()
        finally:
            _end_group(process.pid)
            with trio.CancelScope(shield=True), trio.move_on_after(10):
                await process.wait()
    stdout = out_path.read_text(errors="replace")
    stderr = err_path.read_text(errors="replace")
    assert process.returncode == 0, (
        f"{block.name} exited {process.returncode} (limit {LIMIT_S:g} s)\n--- code\n{block.code}"
        f"--- stdout\n{stdout[-4000:]}\n--- stderr\n{stderr[-4000:]}")


def _end_group(pid: int) -> None:
    """End what the block started: its process group (the group id is the block's own pid)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return
        if sig == signal.SIGTERM:
            deadline = time.monotonic() + 3
            while time.monotonic() < deadline:
                try:
                    os.killpg(pid, 0)
                except ProcessLookupError:
                    return
                time.sleep(0.05)  # synchronous: this runs in a finally block, maybe cancelled

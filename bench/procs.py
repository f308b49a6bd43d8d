"""Processes under test: Redis, the coordinator, the bare baseline server and the load generator.

Every process the bench starts is stopped by its pid (SIGTERM, then SIGKILL)
in `stop()`; everything listens on 127.0.0.1 only. CPU and memory are read
from /proc through psutil.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import psutil

from bench.gcstats import GC_LINE
from rsc.common import gc_policy as gc_control
from rsc.common.redis_server import EmbeddedRedis, ServerTls


class BenchError(RuntimeError):
    """A process under test misbehaved (did not start, answered an error, timed out)."""


def _child_env(gc_mode: str | None = None, **extra: str) -> dict[str, str]:
    env = {**os.environ, **extra}
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    if gc_mode is not None:
        env[gc_control.MODE_ENV] = gc_mode
    return env


class Child:
    """A child process whose stdout we read line by line."""

    def __init__(self, argv: list[str], *, stdin: bool = False, gc_mode: str | None = None,
                 env: dict[str, str] | None = None) -> None:
        self.argv = argv
        self.gc_mode = gc_mode
        self.process = subprocess.Popen(
            argv, stdin=subprocess.PIPE if stdin else subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, env=_child_env(gc_mode, **(env or {})), bufsize=0)
        self.stats = psutil.Process(self.process.pid)
        self._selector = selectors.DefaultSelector()
        assert self.process.stdout is not None
        os.set_blocking(self.process.stdout.fileno(), False)
        self._selector.register(self.process.stdout, selectors.EVENT_READ)
        self._buffer = b""
        self._stderr_tail = b""

    @property
    def pid(self) -> int:
        return self.process.pid

    def readline(self, timeout: float, on_wait: Callable[[], None] | None = None) -> str:
        """The next stdout line; `on_wait` is called about every 0.1 s while waiting (progress)."""
        deadline = time.monotonic() + timeout
        assert self.process.stdout is not None
        while b"\n" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise BenchError(f"{self.argv[2]}: no answer within {timeout:.0f}s")
            if self._selector.select(min(remaining, 0.1)):
                chunk = self.process.stdout.read(65536)
                if not chunk:
                    raise BenchError(f"{self.argv[2]} exited: {self.stderr_tail()}")
                self._buffer += chunk
            elif self.process.poll() is not None:
                raise BenchError(f"{self.argv[2]} exited ({self.process.returncode}): "
                                 f"{self.stderr_tail()}")
            if on_wait is not None:
                on_wait()
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line.decode()

    def stderr_tail(self) -> str:
        assert self.process.stderr is not None
        if self.process.poll() is not None:
            self._stderr_tail = (self._stderr_tail + self.process.stderr.read())[-2000:]
        return self._stderr_tail.decode(errors="replace")

    def cpu_seconds(self) -> float:
        times = self.stats.cpu_times()
        return times.user + times.system

    def rss_mb(self) -> float:
        return self.stats.memory_info().rss / 2**20

    def stop(self) -> None:
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.kill(self.process.pid, signal.SIGKILL)
                self.process.wait()
        for stream in (self.process.stdin, self.process.stdout, self.process.stderr):
            if stream is not None:
                stream.close()
        self._selector.close()


def _drain_stderr_forever(child: Child) -> None:
    """Coordinator logs go to stderr; read them on a thread so the pipe never fills up."""
    import threading

    def pump() -> None:
        assert child.process.stderr is not None
        while True:
            chunk = child.process.stderr.read(65536)
            if not chunk:
                return
            child._stderr_tail = (child._stderr_tail + chunk)[-2000:]

    threading.Thread(target=pump, daemon=True).start()


class Server(Child):
    """A server child that prints `listening on ws://H:P` once it accepts sessions."""

    def __init__(self, argv: list[str], timeout: float = 30, gc_mode: str | None = None) -> None:
        super().__init__(argv, gc_mode=gc_mode)
        _drain_stderr_forever(self)
        self.url = ""
        deadline = time.monotonic() + timeout
        while not self.url:
            line = self.readline(max(0.1, deadline - time.monotonic()))
            if line.startswith("listening on "):
                self.url = line.split(" ", 2)[2].strip()

    def stderr_tail(self) -> str:
        return self._stderr_tail.decode(errors="replace")

    def gc_report(self, timeout: float = 30) -> dict[str, Any]:
        """The server's GC counters so far (bench/gcstats.py); starts a new max-pause window."""
        os.kill(self.process.pid, signal.SIGUSR1)
        deadline = time.monotonic() + timeout
        while True:
            line = self.readline(max(0.1, deadline - time.monotonic()))
            if line.startswith(GC_LINE):
                report: dict[str, Any] = json.loads(line[len(GC_LINE):])
                return report


# set by `python -m bench --profile-coordinator`: each coordinator runs under cProfile into this folder
PROFILE_DIR: str | None = None
# set by `python -m bench --py-spy DIR`: steady windows of the coordinator are sampled by py-spy
PY_SPY_DIR: str | None = None


def py_spy(pid: int, seconds: float, name: str) -> subprocess.Popen[bytes] | None:
    """Sample `pid` for `seconds` with py-spy (collapsed stacks, 25 Hz) into PY_SPY_DIR/name.txt."""
    import shutil

    executable = shutil.which("py-spy") or os.path.join(os.path.dirname(sys.executable), "py-spy")
    if PY_SPY_DIR is None or not os.path.exists(executable):
        return None
    return subprocess.Popen(
        [executable, "record", "--pid", str(pid), "--duration", str(max(1, int(seconds))), "--rate", "25",
         "--format", "raw", "--nonblocking", "--output", os.path.join(PY_SPY_DIR, f"{name}.txt")],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def start_coordinator(redis_url: str, *, heartbeat_interval_ms: int = 3000, lease_ttl_ms: int = 30000,
                      tick_interval_ms: int = 1000, push: bool = True,
                      gc_mode: str | None = None, tls: ServerTls | None = None,
                      extra: Sequence[str] = ()) -> Server:
    profile: list[str] = []
    if PROFILE_DIR is not None:
        profile = ["-m", "cProfile", "-o",
                   os.path.join(PROFILE_DIR, f"coordinator-{time.strftime('%H%M%S')}-{os.getpid()}.prof")]
    argv = [sys.executable, *profile, "-m", "bench.coordinator", "--redis-url", redis_url, "--port", "0",
            "--heartbeat-interval-ms", str(heartbeat_interval_ms), "--lease-ttl-ms", str(lease_ttl_ms),
            "--tick-interval-ms", str(tick_interval_ms), "--log-level", "warning"]
    if not push:
        argv.append("--no-push")
    if tls is not None:  # serves wss://
        argv += ["--tls-cert", tls.cert_file, "--tls-key", tls.key_file]
    argv.extend(extra)  # more coordinator flags
    return Server(argv, gc_mode=gc_mode)


def start_bare(gc_mode: str | None = None) -> Server:
    """The bare baseline, with the same GC mode as the coordinator it is compared with."""
    return Server([sys.executable, "-m", "bench.bare", "--port", "0"], gc_mode=gc_mode)


class CommandedChild(Child):
    """A child process that answers one JSON command per stdin line with one JSON line, and
    leaves on `{"cmd": "exit"}`."""

    name = "child"

    def stderr_tail(self) -> str:
        return self._stderr_tail.decode(errors="replace")

    def send_command(self, command: dict[str, Any], timeout: float,
                     on_wait: Callable[[], None] | None = None) -> dict[str, Any]:
        assert self.process.stdin is not None
        self.process.stdin.write((json.dumps(command) + "\n").encode())
        self.process.stdin.flush()
        result: dict[str, Any] = json.loads(self.readline(timeout, on_wait))
        if "error" in result:
            raise BenchError(f"{self.name} {command['cmd']}: {result['error']}")
        return result

    def stop(self) -> None:
        if self.process.poll() is None and self.process.stdin is not None:
            try:
                self.process.stdin.write(b'{"cmd": "exit"}\n')
                self.process.stdin.flush()
                self.process.wait(timeout=20)
            except (BrokenPipeError, subprocess.TimeoutExpired):
                pass
        super().stop()


class LoadGen(CommandedChild):
    """The load-generator process (bench/loadgen.py), driven one JSON command at a time."""

    name = "load generator"

    def __init__(self, url: str, prefix: str = "bench", group: str = "g",
                 gc_mode: str | None = None, ca_file: str | None = None) -> None:
        super().__init__([sys.executable, "-m", "bench.loadgen", url, prefix, group], stdin=True,
                         gc_mode=gc_mode, env={"RSC_CA_FILE": ca_file} if ca_file else None)
        _drain_stderr_forever(self)
        ready = json.loads(self.readline(30))
        self.fd_limit = ready.get("fdLimit")

    def call(self, cmd: str, timeout: float = 300, on_wait: Callable[[], None] | None = None,
             **fields: Any) -> dict[str, Any]:
        # the load generator's own wait (convergence) ends a little before ours does
        return self.send_command({"cmd": cmd, "timeout": max(1.0, timeout - 5), **fields},
                                 timeout, on_wait)


class CommandChild(CommandedChild):
    """`python -m MODULE ROLE OPTIONS-JSON`: prints one JSON line once ready, then answers
    one JSON command per stdin line with one JSON line (bench/latency.py, bench/rebalance.py)."""

    def __init__(self, module: str, role: str, options: dict[str, Any], *,
                 ready_timeout: float = 60) -> None:
        super().__init__([sys.executable, "-m", module, role, json.dumps(options)], stdin=True)
        self.name = role
        _drain_stderr_forever(self)
        self.ready: dict[str, Any] = json.loads(self.readline(ready_timeout))

    def call(self, cmd: str, timeout: float, **fields: Any) -> dict[str, Any]:
        return self.send_command({"cmd": cmd, **fields}, timeout)


def run_child(module: str, role: str, options: dict[str, Any], timeout: float) -> dict[str, Any]:
    """`python -m MODULE ROLE OPTIONS-JSON` to its end; its last stdout line, as JSON."""
    done = subprocess.run([sys.executable, "-m", module, role, json.dumps(options)],
                          capture_output=True, text=True, timeout=timeout, env=_child_env())
    if done.returncode != 0:
        raise BenchError(f"{module} {role} failed: {done.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


class Redis:
    """A private redis-server for one scenario."""

    def __init__(self) -> None:
        self.server = EmbeddedRedis().start()
        self.url = self.server.url
        assert self.server.process is not None
        self.pid = self.server.process.pid

    def stop(self) -> None:
        self.server.stop()


class Sampler:
    """CPU (cores used) and RSS of some processes over a window."""

    def __init__(self, **children: Child) -> None:
        self.children = children
        self.started = time.perf_counter()
        self.cpu = {name: child.cpu_seconds() for name, child in children.items()}
        self.peak_rss = {name: child.rss_mb() for name, child in children.items()}

    def sample(self) -> None:
        for name, child in self.children.items():
            self.peak_rss[name] = max(self.peak_rss[name], child.rss_mb())

    def result(self) -> dict[str, dict[str, float]]:
        elapsed = time.perf_counter() - self.started
        self.sample()
        return {name: {"cpuCores": (child.cpu_seconds() - self.cpu[name]) / elapsed,
                       "rssMb": child.rss_mb(), "peakRssMb": self.peak_rss[name]}
                for name, child in self.children.items()}

"""The web console in a real browser: Debian's headless `chromium`, driven by playwright.

Each test runs `rsc coordinator --console-port 0` as a child process on the test's
redis-server, real `rsc consume` members (one is SIGKILLed in one test) and a real
`rsc produce`, and reads the pages the way an operator does: visible text, no reload.
Waits are bounded (playwright's `expect` timeouts, or a deadline on a condition).

`python -m tests.test_web_console_browser docs/img` takes the screenshots of the docs.
"""

from __future__ import annotations

import json
import os
import selectors
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

from rsc.admin.client import open_admin_client
from rsc.protocol.messages import DescribeGroup, ReadAudit, Request, SetMaxConcurrency, SetShardCount

ROOT = Path(__file__).resolve().parent.parent
LEASE_MS = 2000
FLAGS = ("--tick-interval-ms", "50", "--lease-ttl-ms", str(LEASE_MS), "--heartbeat-interval-ms", "200",
         "--revoke-timeout-ms", "10000")
START_S = 20
WAIT_MS = 15_000  # a page shows a change: within a second or two, on a busy shared machine
EXPIRY_MS = LEASE_MS + 8_000  # lease + a few seconds (and a slow machine's margin)
MARKUP_GROUP = "<img src=x onerror=alert(1)>"
MARKUP_PREFIX = "<b>bold</b>"
CHROMIUM = shutil.which("chromium")

sync_api: Any = None
try:
    from playwright import sync_api
except ImportError:  # pragma: no cover - the test extra installs it
    pass

pytestmark = pytest.mark.skipif(CHROMIUM is None or sync_api is None,
                                reason="needs chromium and playwright (.ci/run installs them)")


# --- processes --------------------------------------------------------------------------


def rsc(*args: str) -> list[str]:
    return [sys.executable, "-m", "rsc", *args]


@attrs.define
class Coordinator:
    """`rsc coordinator --console-port` as a child process; `url` (ws) and `console` (http)."""

    redis_url: str
    extra: tuple[str, ...] = ()
    port: int = 0
    console_port: int = 0
    process: subprocess.Popen[bytes] | None = None
    url: str = ""
    console: str = ""

    def start(self) -> Coordinator:
        self.process = subprocess.Popen(
            rsc("coordinator", "--redis-url", self.redis_url, "--port", str(self.port),
                "--console-port", str(self.console_port), *FLAGS, *self.extra),
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=ROOT)
        lines = read_lines_until(self.process, "console at ", START_S)
        self.url = next(line for line in lines if line.startswith("listening on ")).split()[-1]
        self.console = lines[-1].split()[-1]
        self.port = int(self.url.rsplit(":", 1)[1])
        self.console_port = int(self.console.rstrip("/").rsplit(":", 1)[1])
        return self

    def stop(self) -> None:
        if self.process is not None:
            stop_process(self.process)
            self.process = None


def read_lines_until(process: subprocess.Popen[bytes], marker: str, timeout_s: float) -> list[str]:
    """stdout lines of `process` up to the first starting with `marker` (bounded)."""
    assert process.stdout is not None
    selector = selectors.DefaultSelector()
    selector.register(process.stdout, selectors.EVENT_READ)
    buffer = b""
    deadline = time.monotonic() + timeout_s
    while True:
        lines = buffer.decode(errors="replace").splitlines()
        if buffer.endswith(b"\n") and any(line.startswith(marker) for line in lines):
            return lines
        remaining = deadline - time.monotonic()
        assert remaining > 0, f"no {marker!r} line within {timeout_s}s: {buffer!r}"
        if selector.select(remaining):
            chunk = os.read(process.stdout.fileno(), 4096)
            assert chunk, f"the coordinator exited early: {buffer!r}"
            buffer += chunk


def stop_process(process: subprocess.Popen[Any]) -> None:
    """SIGTERM and wait (bounded); SIGKILL when it does not stop."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


def consumer(coordinator: Coordinator, prefix: str, group: str, *extra: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(rsc("consume", prefix, group, "--coordinator", coordinator.url,
                                "--redis-url", coordinator.redis_url, *extra),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)


def produce(coordinator: Coordinator, prefix: str, count: int) -> None:
    lines = "".join(f"customer-{i % 37}\torder {i}\n" for i in range(count))
    subprocess.run(rsc("produce", prefix, "--coordinator", coordinator.url, "--redis-url",
                       coordinator.redis_url), input=lines.encode(), check=True, timeout=60,
                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=ROOT)


def admin(coordinator: Coordinator, request: Request, token: str | None = None) -> dict[str, Any]:
    """One admin request over a real session; its raw JSON answer."""
    async def call() -> dict[str, Any]:
        async with open_admin_client(coordinator.url, token=token) as client:
            with trio.fail_after(10):
                return await client.session.request(request)

    return trio.run(call)


def describe(coordinator: Coordinator, prefix: str, group: str, token: str | None = None) -> dict[str, Any]:
    return admin(coordinator, DescribeGroup(request_id=0, stream_prefix=prefix, consumer_group=group),
                 token)


def set_shards(coordinator: Coordinator, prefix: str, group: str, count: int,
               token: str | None = None) -> None:
    answer = admin(coordinator, SetShardCount(request_id=0, stream_prefix=prefix, consumer_group=group,
                                              shard_count=count), token)
    assert answer["status"] == "OK", answer


def wait_for(check: Callable[[], Any], what: str, timeout_s: float = 30) -> Any:
    """Poll `check` until it returns something truthy (bounded); that value."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"not within {timeout_s}s: {what}"
        time.sleep(0.1)


@attrs.define
class Orders:
    """The scenario: prefix `orders`, 4 shards; `billing` has two members and has consumed all
    PRODUCED entries; `audit` is registered without members, so all of them are its lag."""

    coordinator: Coordinator
    members: list[subprocess.Popen[bytes]]

    PRODUCED = 1500

    def member_ids(self, process: subprocess.Popen[bytes], token: str | None = None) -> list[str]:
        return [member["memberId"] for member in
                describe(self.coordinator, "orders", "billing", token)["members"]
                if f"-{process.pid}-" in member["memberId"]]


def orders(coordinator: Coordinator, token: str | None = None) -> Orders:
    set_shards(coordinator, "orders", "audit", 4, token)  # registers audit: it never consumes
    produce(coordinator, "orders", Orders.PRODUCED)
    members = [consumer(coordinator, "orders", "billing", *(("--token", token) if token else ()))
               for _ in range(2)]
    scenario = Orders(coordinator, members)

    def settled() -> bool:
        described = describe(coordinator, "orders", "billing", token)
        return (len(described["members"]) == 2 and described["state"] == "STABLE"
                and all(shard["lag"] == 0 and shard["pending"] == 0 for shard in described["shards"]))

    wait_for(settled, "billing has two stable members and has consumed everything")
    return scenario


# --- the browser ------------------------------------------------------------------------


@attrs.define
class Tab:
    """A page with every console error, page error and dialog it produced."""

    page: Any
    errors: list[str]

    def no_errors(self, allowed: tuple[str, ...] = ()) -> None:
        unexpected = [error for error in self.errors if not any(text in error for text in allowed)]
        assert not unexpected, unexpected


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM)
        yield launched
        launched.close()


@pytest.fixture
def tab(browser: Any) -> Iterator[Tab]:
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    page.on("console", lambda message: errors.append(f"console: {message.text}")
            if message.type == "error" else None)
    page.on("pageerror", lambda error: errors.append(f"pageerror: {error}"))

    def dialog(opened: Any) -> None:
        errors.append(f"dialog: {opened.message}")
        opened.dismiss()

    page.on("dialog", dialog)
    yield Tab(page, errors)
    context.close()


@pytest.fixture
def coordinators(redis_url: str) -> Iterator[Callable[..., Coordinator]]:
    started: list[Coordinator] = []

    def start(*extra: str) -> Coordinator:
        coordinator = Coordinator(redis_url, extra).start()
        started.append(coordinator)
        return coordinator

    yield start
    for coordinator in started:
        coordinator.stop()


@pytest.fixture
def scenario(coordinators: Callable[..., Coordinator]) -> Iterator[Orders]:
    made = orders(coordinators())
    yield made
    for member in made.members:
        stop_process(member)


def expect() -> Any:
    return sync_api.expect


def row(tab: Tab, table: str, text: str) -> Any:
    return tab.page.locator(f"#{table} tbody tr").filter(has_text=text)


def cells(locator: Any) -> list[str]:
    return [text.strip() for text in locator.locator("td").all_inner_texts()]


def overview_row(tab: Tab, prefix: str, group: str) -> Any:
    return tab.page.locator("#groups tbody tr").filter(
        has=tab.page.locator("td:nth-child(1)", has_text=prefix)).filter(
        has=tab.page.get_by_role("link", name=group, exact=True))


def group_url(coordinator: Coordinator, prefix: str, group: str) -> str:
    from urllib.parse import urlencode

    return f"{coordinator.console}group?{urlencode({'prefix': prefix, 'group': group})}"


def mark_page(tab: Tab) -> None:
    """A value only this document holds: a reload or a navigation would lose it."""
    tab.page.evaluate("window.__sameDocument = 'yes'")


def same_document(tab: Tab) -> bool:
    return bool(tab.page.evaluate("window.__sameDocument === 'yes'"))


# --- tests ------------------------------------------------------------------------------


def test_the_overview_shows_every_group_with_members_and_backlog(scenario: Orders, tab: Tab):
    coordinator = scenario.coordinator
    response = tab.page.goto(coordinator.console)
    assert response is not None and response.status == 200
    billing = overview_row(tab, "orders", "billing")
    audit = overview_row(tab, "orders", "audit")
    expect()(billing).to_have_count(1, timeout=WAIT_MS)
    # prefix, group, state, group epoch, members, shards, backlog, undelivered, unacked, migration
    headers = tab.page.locator("#groups thead th")
    expect()(headers.nth(6)).to_have_text("Backlog")
    expect()(headers.nth(7)).to_have_text("Undelivered")
    expect()(headers.nth(8)).to_have_text("Unacked")
    expect()(billing.locator("td:nth-child(5)")).to_have_text("2", timeout=WAIT_MS)
    assert cells(billing)[5:9] == ["4", "0", "0", "0"]
    expect()(audit.locator("td:nth-child(7)")).to_have_text("1,500", timeout=WAIT_MS)
    assert cells(audit)[2] == "EMPTY" and cells(audit)[4] == "0"
    assert cells(audit)[7:9] == ["1,500", "0"], "registered, never read: all of it undelivered"
    expect()(tab.page.locator("#summary")).to_contain_text("backlog 1,500 (undelivered 1,500, unacked 0)")
    total = tab.page.locator("#groups tfoot td")
    expect()(total.nth(6)).to_have_text("1,500")
    expect()(total.nth(4)).to_have_text("2")

    mark_page(tab)
    set_shards(coordinator, "clicks", "etl", 2)  # a new group shows up live
    produce(coordinator, "clicks", 2345)
    etl = overview_row(tab, "clicks", "etl")
    expect()(etl.locator("td:nth-child(7)")).to_have_text("2,345", timeout=WAIT_MS)
    expect()(total.nth(6)).to_have_text("3,845", timeout=WAIT_MS)

    tab.page.locator("#groups th[data-key=backlog] button").click()  # ascending, then descending
    tab.page.locator("#groups th[data-key=backlog] button").click()
    first = tab.page.locator("#groups tbody tr").first
    expect()(first.get_by_role("link")).to_have_text("etl")
    tab.page.fill("#filter", "aud")
    expect()(tab.page.locator("#groups tbody tr")).to_have_count(1)
    expect()(tab.page.locator("#groups tbody tr").first.get_by_role("link")).to_have_text("audit")
    assert same_document(tab)

    tab.page.fill("#filter", "")
    billing.get_by_role("link", name="billing").click()
    tab.page.wait_for_url("**/group?prefix=orders&group=billing", timeout=WAIT_MS)
    expect()(tab.page.locator("#title")).to_have_text("orders / billing", timeout=WAIT_MS)
    tab.no_errors()


def test_the_group_page_lists_members_and_every_shard_with_its_owner(scenario: Orders, tab: Tab):
    coordinator = scenario.coordinator
    tab.page.goto(group_url(coordinator, "orders", "billing"))
    described = describe(coordinator, "orders", "billing")
    for member in described["members"]:
        member_row = row(tab, "members", member["memberId"])
        expect()(member_row).to_have_count(1, timeout=WAIT_MS)
        shown = cells(member_row)
        assert shown[0] == member["memberId"]  # in full, as text
        assert shown[1] == "-" and shown[2] == "STABLE"  # no instanceId (dynamic members)
        assert shown[3] == str(member["memberEpoch"]) and shown[4] == str(member["capacity"])
        assert shown[5].endswith("ms ago")
        assert shown[6].split() == member["assignedShards"]
    shard_rows = tab.page.locator("#shards tbody tr")
    expect()(shard_rows).to_have_count(4)
    for shard in described["shards"]:
        shown = cells(row(tab, "shards", shard["shard"]))
        assert shown[0] == shard["shard"] and shown[2] == shard["owner"]  # owner on the same row
        assert shown[4:7] == ["0", "0", "0"]  # backlog, undelivered, unacked
    expect()(tab.page.locator("#migration")).to_be_hidden()
    expect()(tab.page.locator("#lag-chart polyline").first).to_be_attached(timeout=WAIT_MS)
    tab.no_errors()


def test_a_reloaded_group_page_draws_the_lag_from_before_it_opened(scenario: Orders, tab: Tab):
    tab.page.goto(group_url(scenario.coordinator, "orders", "billing"))
    chart = tab.page.locator("#lag-chart")
    expect()(chart.locator("polyline").first).to_be_attached(timeout=WAIT_MS)
    reloaded_at = time.time() * 1000
    tab.page.reload()
    expect()(chart.locator("polyline").first).to_be_attached(timeout=WAIT_MS)
    # the console kept what the first page saw and sent it to the new one (same machine clock)
    wait_for(lambda: float(chart.get_attribute("data-first") or "inf") < reloaded_at,
             "the chart reaching back to before the reload", timeout_s=WAIT_MS / 1000)
    tab.no_errors()


def test_c4_the_chart_reaches_back_an_hour(scenario: Orders, tab: Tab):
    tab.page.goto(group_url(scenario.coordinator, "orders", "billing"))
    chart = tab.page.locator("#lag-chart")
    expect()(chart.locator("polyline").first).to_be_attached(timeout=WAIT_MS)
    # the page's own chart code, given an hour of 20 s buckets (as the console sends them)
    labels = tab.page.evaluate("""() => {
        const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
        document.body.appendChild(svg);
        const now = Date.now();
        const points = [];
        for (let t = now - 3600000; t <= now; t += 20000) { points.push([t, (t / 1000) % 50]); }
        window.RscChart.draw(svg, [{name: "undelivered", cls: "lag", points: points}],
                             {now: now, windowMs: 3600000});
        const shown = Array.from(svg.querySelectorAll(".axes text")).map((n) => n.textContent);
        const drawn = svg.querySelector("polyline").getAttribute("points").split(" ").length;
        svg.remove();
        return {shown: shown, drawn: drawn};
    }""")
    assert labels["drawn"] == 181
    assert [text for text in labels["shown"] if "min" in text or text == "now"] == [
        "now", "-10 min", "-20 min", "-30 min", "-40 min", "-50 min", "-60 min"]
    # C4: the ages' chart, the same code in seconds: an hour of an entry getting older
    ages = tab.page.evaluate("""() => {
        const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
        document.body.appendChild(svg);
        const now = Date.now();
        const points = [];
        for (let t = now - 3600000; t <= now; t += 20000) { points.push([t, (t - now + 3600000) / 1000]); }
        window.RscChart.draw(svg, [{name: "oldest undelivered", cls: "lag", points: points}],
                             {now: now, windowMs: 3600000, unit: "s"});
        const shown = Array.from(svg.querySelectorAll(".axes text[text-anchor=end]"))
            .map((n) => n.textContent);
        const legend = svg.querySelector(".legend").textContent;
        svg.remove();
        return {shown: shown, legend: legend};
    }""")
    assert ages["shown"] == ["0 s", "15 min", "30 min", "45 min", "1 h"]
    assert ages["legend"] == "oldest undelivered 1 h"
    tab.no_errors()


def age_legend(tab: Tab) -> dict[str, float]:
    """The age chart's legend as seconds by series: {"oldest undelivered": 12.0, ...}."""
    units = {"s": 1, "min": 60, "h": 3600}
    shown: dict[str, float] = {}
    for text in tab.page.locator("#age-chart .legend").all_text_contents():
        words = text.split()  # "oldest undelivered 1 min 5 s"
        figures = words[2:]
        if figures != ["unknown"]:
            shown[" ".join(words[:2])] = sum(float(figures[i].replace(",", "")) * units[figures[i + 1]]
                                             for i in range(0, len(figures), 2))
    return shown


def test_c4_the_age_chart_shows_a_stalled_backlog_getting_older(scenario: Orders, tab: Tab):
    coordinator = scenario.coordinator
    # audit never consumes: its oldest undelivered entry only gets older, and nothing is unacked
    tab.page.goto(group_url(coordinator, "orders", "audit"))
    chart = tab.page.locator("#age-chart")
    expect()(chart.locator("polyline.series.lag")).to_have_count(1, timeout=WAIT_MS)
    expect()(chart.locator("polyline.series.pending")).to_have_count(1)
    described = describe(coordinator, "orders", "audit")["oldestUndeliveredAgeMs"] / 1000
    first = wait_for(lambda: age_legend(tab).get("oldest undelivered"), "the age in the legend")
    assert described - 3 <= first <= described + 5, (described, first)
    assert age_legend(tab)["oldest unacked"] == 0  # nothing delivered: 0 s, as the metric
    # no push comes (only the ages move, C4), and the line still climbs with the clock
    later = wait_for(lambda: (age := age_legend(tab)["oldest undelivered"]) >= first + 3 and age,
                     "the age growing", timeout_s=WAIT_MS / 1000)
    assert later <= first + WAIT_MS / 1000 + 2
    line = [tuple(map(float, xy.split(","))) for xy in
            chart.locator("polyline.series.lag").get_attribute("points").split()]
    assert line[-1][0] > line[0][0] and line[-1][1] < line[0][1]  # later, higher (SVG y is down)
    expect()(tab.page.locator("#lag-chart polyline.series.lag")).to_have_count(1)
    tab.no_errors()


def test_a_sigkilled_member_disappears_from_the_page_without_reload(scenario: Orders, tab: Tab):
    coordinator = scenario.coordinator
    victim, survivor = scenario.members
    victim_ids = wait_for(lambda: scenario.member_ids(victim), "the victim's member id")
    survivor_ids = scenario.member_ids(survivor)
    tab.page.goto(group_url(coordinator, "orders", "billing"))
    expect()(row(tab, "members", victim_ids[0])).to_have_count(1, timeout=WAIT_MS)
    mark_page(tab)
    victim.send_signal(signal.SIGKILL)
    victim.wait(timeout=10)
    expect()(row(tab, "members", victim_ids[0])).to_have_count(0, timeout=EXPIRY_MS)
    assert same_document(tab)
    expect()(tab.page.locator("#members tbody tr")).to_have_count(1)
    for shard_row in tab.page.locator("#shards tbody tr").all():  # its shards go to the survivor
        expect()(shard_row.locator("td:nth-child(3)")).to_have_text(survivor_ids[0], timeout=WAIT_MS)
    tab.no_errors()


def test_a_reshard_shows_up_live_with_the_group_that_blocks_it(scenario: Orders, tab: Tab):
    coordinator = scenario.coordinator
    tab.page.goto(group_url(coordinator, "orders", "billing"))
    expect()(tab.page.locator("#shards tbody tr")).to_have_count(4, timeout=WAIT_MS)
    mark_page(tab)
    set_shards(coordinator, "orders", "billing", 6)
    for index in range(6):
        expect()(row(tab, "shards", f"{{orders:v2:{index}}}")).to_have_count(1, timeout=WAIT_MS)
    expect()(row(tab, "shards", "{orders:v1:0}")).to_have_count(1)  # old version still live
    expect()(tab.page.locator("#migration")).to_be_visible(timeout=WAIT_MS)
    expect()(tab.page.locator("#migration-line")).to_contain_text("version 1 to 2")
    blocker = row(tab, "blockers", "audit")  # G2: audit never consumed the old shards
    expect()(blocker).to_have_count(1, timeout=WAIT_MS)
    assert cells(blocker) == ["audit", "1,500", "0"]
    assert same_document(tab)

    tab.page.goto(coordinator.console)
    expect()(overview_row(tab, "orders", "billing").locator("td:nth-child(10)")).to_contain_text(
        "blocked by audit", timeout=WAIT_MS)
    tab.no_errors()


def test_the_token_gate_shows_nothing_before_the_token_and_refuses_a_wrong_one(
        coordinators: Callable[..., Coordinator], tab: Tab):
    coordinator = coordinators("--admin-token", "s3cret")
    set_shards(coordinator, "orders", "billing", 2, token="s3cret")
    frames: list[str] = []
    tab.page.on("websocket", lambda socket: socket.on("framereceived", lambda body: frames.append(
        body if isinstance(body, str) else body.get("payload", ""))))
    response = tab.page.goto(coordinator.console)
    assert response is not None and response.status in (200, 401)
    form = tab.page.locator("#login-form")
    expect()(form).to_be_visible(timeout=WAIT_MS)
    assert form.locator("input").count() == 1 and form.locator("button").count() == 1
    expect()(tab.page.locator("#content")).to_be_hidden()
    assert "billing" not in tab.page.locator("body").inner_text()
    assert not [body for body in frames if json.loads(body).get("type") != "auth"], frames

    tab.page.fill("#token", "wrong")
    tab.page.press("#token", "Enter")
    expect()(tab.page.locator("#login-error")).to_be_visible(timeout=WAIT_MS)
    expect()(tab.page.locator("#login-error")).to_contain_text("Wrong token")
    assert "billing" not in tab.page.locator("body").inner_text()

    tab.page.fill("#token", "s3cret")
    form.locator("button").click()
    expect()(overview_row(tab, "orders", "billing")).to_have_count(1, timeout=WAIT_MS)
    expect()(form).to_be_hidden()
    overview_row(tab, "orders", "billing").get_by_role("link").click()  # the token goes along
    expect()(tab.page.locator("#title")).to_have_text("orders / billing", timeout=WAIT_MS)
    expect()(tab.page.locator("#shards tbody tr")).to_have_count(2, timeout=WAIT_MS)
    tab.no_errors()


def test_markup_in_names_is_shown_as_text(coordinators: Callable[..., Coordinator], tab: Tab):
    coordinator = coordinators()
    set_shards(coordinator, MARKUP_PREFIX, MARKUP_GROUP, 2)
    tab.page.goto(coordinator.console)
    link = tab.page.get_by_role("link", name=MARKUP_GROUP, exact=True)
    expect()(link).to_have_count(1, timeout=WAIT_MS)
    expect()(tab.page.locator("#groups tbody td").first).to_have_text(MARKUP_PREFIX)
    assert tab.page.locator("#groups img, #groups b").count() == 0
    link.click()
    expect()(tab.page.locator("#title")).to_have_text(f"{MARKUP_PREFIX} / {MARKUP_GROUP}",
                                                      timeout=WAIT_MS)
    expect()(tab.page.locator("#crumb-group")).to_have_text(MARKUP_GROUP)
    expect()(row(tab, "shards", f"{{{MARKUP_PREFIX}:v1:1}}")).to_have_count(1, timeout=WAIT_MS)
    assert tab.page.locator("main img, main b, header img, header b").count() == 0
    assert MARKUP_GROUP in tab.page.title()
    tab.no_errors()  # includes: no alert() dialog ever opened


def test_c3_the_audit_page_shows_changes_from_the_cli_live_with_their_peer(
        coordinators: Callable[..., Coordinator], tab: Tab):
    coordinator = coordinators("--admin-token", "s3cret")
    set_shards(coordinator, MARKUP_PREFIX, MARKUP_GROUP, 2, token="s3cret")
    tab.page.goto(coordinator.console + "audit")
    tab.page.fill("#token", "s3cret")
    tab.page.press("#token", "Enter")
    first = row(tab, "audit", "setShardCount")
    expect()(first).to_have_count(1, timeout=WAIT_MS)
    shown = cells(first)
    assert shown[1].startswith("127.0.0.1:") and shown[2] == "admin"
    assert shown[4:6] == [MARKUP_PREFIX, MARKUP_GROUP] and shown[7] == "OK"
    assert '"routing":null' in shown[8].replace(" ", "")
    mark_page(tab)
    set_shards(coordinator, MARKUP_PREFIX, MARKUP_GROUP, 3, token="s3cret")  # live, no reload
    expect()(row(tab, "audit", "setShardCount")).to_have_count(2, timeout=WAIT_MS)
    newest = cells(tab.page.locator("#audit tbody tr").first)
    assert '"shardCount":3' in newest[6].replace(" ", "") and '"version": 1' in newest[8]
    assert same_document(tab)
    assert tab.page.locator("main img, main b").count() == 0
    tab.no_errors()


def test_c2_the_messages_page_shows_binary_values_and_hostile_names_as_text(
        coordinators: Callable[..., Coordinator], tab: Tab):
    import redis

    coordinator = coordinators("--admin-token", "s3cret")
    set_shards(coordinator, MARKUP_PREFIX, MARKUP_GROUP, 1, token="s3cret")
    shard = f"{{{MARKUP_PREFIX}:v1:0}}"
    client = redis.Redis.from_url(coordinator.redis_url)
    client.xadd(shard, {"key": MARKUP_GROUP, "value": '{"b": [1, 2]}',
                        "h:<script>alert(1)</script>": "<b>x</b>"})
    client.xadd(shard, {"value": b"\x00\xff"})  # not UTF-8: base64
    client.xadd(shard, {"value": "last"})
    client.close()
    tab.page.goto(group_url(coordinator, MARKUP_PREFIX, MARKUP_GROUP))
    tab.page.fill("#token", "s3cret")
    tab.page.press("#token", "Enter")
    tab.page.click("#messages-link")  # the token stays for the session
    expect()(tab.page.locator("#shard option")).to_have_count(1, timeout=WAIT_MS)
    tab.page.click("#read")
    expect()(tab.page.locator("#messages tbody tr")).to_have_count(3, timeout=WAIT_MS)
    texts = [cells(tab.page.locator("#messages tbody tr").nth(i)) for i in range(3)]
    assert texts[0][2] == "last" and texts[1][2] == "base64: AP8="
    assert texts[2][1] == MARKUP_GROUP and texts[2][2] == '{\n  "b": [\n    1,\n    2\n  ]\n}'
    assert "h:<script>alert(1)</script>" in texts[2][3] and "<b>x</b>" in texts[2][3]
    assert tab.page.locator("main img, main b, main script").count() == 0
    assert tab.page.locator("#next").is_disabled()
    tab.no_errors()  # includes: no alert() dialog ever opened


def audit_entries(coordinator: Coordinator, token: str) -> list[dict[str, Any]]:
    return list(admin(coordinator, ReadAudit(request_id=0, count=100), token)["entries"])


def confirm(tab: Tab, *expected: str) -> None:
    """The confirmation dialog shows what will change; confirm it."""
    dialog = tab.page.locator("#confirm")
    expect()(dialog).to_be_visible(timeout=WAIT_MS)
    for text in expected:
        expect()(dialog).to_contain_text(text)
    tab.page.click("#confirm-yes")
    expect()(dialog).to_be_hidden()


def result(tab: Tab, text: str) -> None:
    expect()(tab.page.locator("#action-result")).to_have_text(text, timeout=WAIT_MS)


def caught_up(tab: Tab, coordinator: Coordinator, members: int = 0) -> None:
    """Wait until the group has settled (STABLE with `members` members, or EMPTY) and the page
    shows the group epoch the coordinator has: a confirmation carries the epoch on the page,
    so one confirmed before the page caught up is refused as stale, rightly."""
    settled = wait_for(lambda: (lambda d: d if d["state"] in ("STABLE", "EMPTY")
                                and len(d["members"]) == members else None)(
        describe(coordinator, "orders", "billing", "s3cret")), "the group settled")
    expect()(tab.page.locator("#facts dt:text-is('Group epoch') + dd")).to_have_text(
        f"{settled['groupEpoch']:,}", timeout=WAIT_MS)


def test_c1_every_action_behind_its_confirmation_through_the_admin_requests(
        coordinators: Callable[..., Coordinator], tab: Tab):
    coordinator = coordinators("--admin-token", "s3cret", "--viewer-token", "peek")
    set_shards(coordinator, "orders", "billing", 2, token="s3cret")
    tab.page.goto(group_url(coordinator, "orders", "billing"))
    tab.page.fill("#token", "s3cret")
    tab.page.press("#token", "Enter")
    expect()(tab.page.locator("#actions")).to_be_visible(timeout=WAIT_MS)
    mark_page(tab)

    tab.page.fill("#concurrency-input", "3")
    tab.page.click("#action-concurrency button")
    confirm(tab, "max concurrency: members' capacity -> 3", "group epoch")
    result(tab, "setMaxConcurrency: OK")
    assert describe(coordinator, "orders", "billing", "s3cret")["maxConcurrency"] == 3
    caught_up(tab, coordinator)  # each action below waits for the page to show the last one's epoch

    tab.page.fill("#retention-length", "5000")
    tab.page.click("#action-retention button")
    confirm(tab, "-> acked, max length 5,000")
    result(tab, "setRetention: OK")
    caught_up(tab, coordinator)

    tab.page.select_option("#reset-to", "latest")
    tab.page.click("#action-reset button")  # the dry run answers first, nothing moves yet
    confirm(tab, "{orders:v1:0}: last delivered", "{orders:v1:1}")
    result(tab, "resetOffsets: OK")
    caught_up(tab, coordinator)

    # a confirmation older than the group's epoch is refused and changes nothing
    tab.page.fill("#shards-input", "4")
    tab.page.click("#action-shards button")
    expect()(tab.page.locator("#confirm")).to_contain_text("2 -> 4 shard(s)", timeout=WAIT_MS)
    admin(coordinator, SetMaxConcurrency(request_id=0, stream_prefix="orders",
                                         consumer_group="billing", max_concurrency=5), "s3cret")
    tab.page.click("#confirm-yes")
    expect()(tab.page.locator("#action-result")).to_contain_text("STALE_CONFIRMATION",
                                                                 timeout=WAIT_MS)
    now = describe(coordinator, "orders", "billing", "s3cret")
    assert now["routing"]["shardCount"] == 2
    # the page moved on: it shows the group epoch the change made (the next confirmation
    # carries it; "max length 5,000" already held a 5) and the new max concurrency
    expect()(tab.page.locator("#facts dt:text-is('Group epoch') + dd")).to_have_text(
        f"{now['groupEpoch']:,}", timeout=WAIT_MS)
    expect()(tab.page.locator("#facts dt:text-is('Max concurrency') + dd")).to_have_text("5")
    tab.page.click("#action-shards button")
    confirm(tab, "2 -> 4 shard(s)", "routing version 1 -> 2")
    result(tab, "setShardCount: OK")
    expect()(tab.page.locator("#shards tbody tr")).to_have_count(4, timeout=WAIT_MS)  # drained

    member = consumer(coordinator, "orders", "billing")
    try:
        remove = tab.page.locator("#members tbody tr button.remove")
        expect()(remove).to_have_count(1, timeout=WAIT_MS)
        caught_up(tab, coordinator, members=1)  # joined and holding its shards
        member_id = tab.page.locator("#members tbody tr td").first.inner_text()
        remove.click()
        confirm(tab, f"member {member_id} leaves the group")
        result(tab, "removeMember: OK")
    finally:
        stop_process(member)
    left = wait_for(lambda: (lambda d: d if not d["members"] else None)(
        describe(coordinator, "orders", "billing", "s3cret")), "the consumer left")
    # the confirmation carries the epoch the page shows: wait until the page shows the one the
    # coordinator has (the member's leaving moved it), or the delete is refused as stale
    expect()(tab.page.locator("#facts dt:text-is('Group epoch') + dd")).to_have_text(
        f"{left['groupEpoch']:,}", timeout=WAIT_MS)
    tab.page.click("#action-delete button")
    confirm(tab, "group billing of orders is deleted")
    result(tab, "deleteGroup: OK")
    expect()(tab.page.locator("#unknown")).to_be_visible(timeout=WAIT_MS)
    assert same_document(tab)

    entries = audit_entries(coordinator, "s3cret")
    refused = [e for e in entries if e.get("via") == "console" and e["request"] is None]
    assert refused and refused[0]["status"] == "UNAUTHORIZED"  # the page's first, tokenless try
    mine = [e for e in entries if e.get("via") == "console" and e["request"] is not None]
    assert [(e["request"]["type"], e["status"]) for e in reversed(mine)] == [
        ("setMaxConcurrency", "OK"), ("setRetention", "OK"), ("resetOffsets", "OK"),
        ("setShardCount", "STALE_CONFIRMATION"), ("setShardCount", "OK"), ("removeMember", "OK"),
        ("deleteGroup", "OK")]  # the dry run sent no change; the coordinator refused the stale one
    stale = [e for e in mine if e["status"] == "STALE_CONFIRMATION"][0]["request"]
    assert stale["ifRoutingVersion"] == 1 and isinstance(stale["ifGroupEpoch"], int)
    assert all(e["role"] == "admin" and e["peer"].startswith("127.0.0.1:") for e in mine)
    assert mine[0]["before"]["groupEpoch"] is not None  # deleteGroup: what was there
    tab.no_errors()


def test_c1_the_viewer_token_shows_no_actions_and_an_action_sent_anyway_is_refused(
        coordinators: Callable[..., Coordinator], tab: Tab):
    coordinator = coordinators("--admin-token", "s3cret", "--viewer-token", "peek")
    set_shards(coordinator, "orders", "billing", 2, token="s3cret")
    tab.page.goto(group_url(coordinator, "orders", "billing"))
    tab.page.fill("#token", "peek")
    tab.page.press("#token", "Enter")
    expect()(tab.page.locator("#shards tbody tr")).to_have_count(2, timeout=WAIT_MS)
    expect()(tab.page.locator("#actions")).to_be_hidden()
    answer = tab.page.evaluate("""() => new Promise((resolve) => {
        const socket = new WebSocket(`ws://${location.host}/ws`);
        socket.onopen = () => socket.send(JSON.stringify({view: "group", token: "peek",
            streamPrefix: "orders", consumerGroup: "billing"}));
        socket.onmessage = (event) => {
          const body = JSON.parse(event.data);
          if (body.type === "auth") {
            socket.send(JSON.stringify({type: "action", id: 1, action: "deleteGroup",
              params: {}, confirmedAt: {groupEpoch: null, routingVersion: null}}));
          } else if (body.type === "actionResult") { resolve(body); socket.close(); }
        };
    })""")
    assert answer["status"] == "NOT_AUTHORIZED"
    assert describe(coordinator, "orders", "billing", "s3cret")["status"] == "OK"
    tab.no_errors()


def test_c1_a_page_on_another_origin_cannot_trigger_an_action(
        coordinators: Callable[..., Coordinator], tab: Tab):
    coordinator = coordinators("--admin-token", "s3cret")
    set_shards(coordinator, "orders", "billing", 2, token="s3cret")
    feed = coordinator.console.replace("http://", "ws://") + "ws"
    hostile = """<!doctype html><html><body><script>
      window.outcome = [];
      const socket = new WebSocket(FEED_URL);
      socket.onopen = () => { window.outcome.push("open");
        socket.send(JSON.stringify({view: "group", token: "s3cret", streamPrefix: "orders",
          consumerGroup: "billing"}));
        socket.send(JSON.stringify({type: "action", id: 1, action: "deleteGroup", params: {},
          confirmedAt: {groupEpoch: null, routingVersion: null}})); };
      socket.onmessage = (event) => window.outcome.push(event.data);
      socket.onerror = () => window.outcome.push("error");
      socket.onclose = () => window.outcome.push("closed");
    </script></body></html>""".replace("FEED_URL", json.dumps(feed))
    tab.page.route("http://elsewhere.test/**", lambda route: route.fulfill(
        status=200, content_type="text/html", body=hostile))
    tab.page.goto("http://elsewhere.test/page")
    wait_for(lambda: "closed" in tab.page.evaluate("window.outcome"), "the refused socket closed")
    assert "open" not in tab.page.evaluate("window.outcome")  # the handshake got 403
    posted = tab.page.request.post(coordinator.console + "ws", data="{}")
    assert posted.status in (400, 405)  # never as plain HTTP
    assert describe(coordinator, "orders", "billing", "s3cret")["status"] == "OK"
    assert [e["request"]["type"] for e in audit_entries(coordinator, "s3cret")] == ["setShardCount"]


def test_a_broken_connection_reconnects_and_says_so(coordinators: Callable[..., Coordinator], tab: Tab):
    coordinator = coordinators()
    set_shards(coordinator, "orders", "billing", 2)
    tab.page.goto(coordinator.console)
    expect()(overview_row(tab, "orders", "billing")).to_have_count(1, timeout=WAIT_MS)
    expect()(tab.page.locator("#status")).to_have_text("live")
    mark_page(tab)
    coordinator.stop()
    expect()(tab.page.locator("#status")).to_contain_text("connection lost", timeout=WAIT_MS)
    expect()(tab.page.locator("#status")).to_contain_text("reconnecting")
    coordinator.start()  # the same ports again
    expect()(tab.page.locator("#status")).to_contain_text("reconnected", timeout=WAIT_MS)
    set_shards(coordinator, "clicks", "etl", 2)  # fed again, live
    expect()(overview_row(tab, "clicks", "etl")).to_have_count(1, timeout=WAIT_MS)
    assert same_document(tab)
    # while the console was down, the browser's reconnect attempts are refused and it says so
    tab.no_errors(allowed=("WebSocket connection to", "ERR_CONNECTION_REFUSED"))


# --- screenshots for the docs -----------------------------------------------------------


def screenshots(out: Path) -> None:  # pragma: no cover - run by hand for docs/img
    """The docs' two pictures: orders resharded and held up by audit (G2), billing with
    slow members catching up on a burst (its lag over time), clicks beside them."""
    import threading

    from rsc.common.redis_server import EmbeddedRedis

    out.mkdir(parents=True, exist_ok=True)
    with EmbeddedRedis() as server:
        coordinator = Coordinator(server.url).start()
        scenario = orders(coordinator)
        set_shards(coordinator, "clicks", "etl", 3)
        extra = [consumer(coordinator, "clicks", "etl", "--work-ms", "20")]
        try:
            produce(coordinator, "clicks", 900)
            set_shards(coordinator, "orders", "billing", 6)
            for member in scenario.members:  # slower members: the burst below shows as lag
                stop_process(member)
            extra += [consumer(coordinator, "orders", "billing", "--work-ms", "8") for _ in range(2)]
            def produce_a_burst() -> None:
                for _ in range(4):
                    produce(coordinator, "orders", 1200)

            burst = threading.Thread(target=produce_a_burst)
            assert sync_api is not None and CHROMIUM is not None
            with sync_api.sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=CHROMIUM)
                page = browser.new_page(viewport={"width": 1400, "height": 800})
                page.goto(group_url(coordinator, "orders", "billing"))
                sync_api.expect(page.locator("#migration")).to_be_visible(timeout=WAIT_MS)
                sync_api.expect(page.locator("#members tbody tr")).to_have_count(2, timeout=WAIT_MS)
                page.wait_for_timeout(10_000)  # a quiet stretch on the chart, then the burst
                burst.start()
                burst.join()
                page.wait_for_timeout(1000)
                page.screenshot(path=str(out / "console-group.png"), full_page=True)
                page.set_viewport_size({"width": 1400, "height": 300})
                page.goto(coordinator.console)
                sync_api.expect(page.locator("#groups tbody tr")).to_have_count(3, timeout=WAIT_MS)
                page.wait_for_timeout(1500)
                page.screenshot(path=str(out / "console-overview.png"), full_page=True)
                browser.close()
        finally:
            for member in extra:
                stop_process(member)
            coordinator.stop()


if __name__ == "__main__":  # pragma: no cover
    screenshots(Path(sys.argv[1] if len(sys.argv) > 1 else "docs/img"))


def test_c1_the_group_page_shows_its_dead_letters_and_redrives_them_after_the_dry_run(
        coordinators: Callable[..., Coordinator], tab: Tab):
    import redis

    coordinator = coordinators("--admin-token", "s3cret")
    set_shards(coordinator, "orders", "billing", 1, token="s3cret")
    client = redis.Redis.from_url(coordinator.redis_url, decode_responses=True)
    stream = "{orders}:dead:billing"
    try:
        dead = client.xadd(stream, {"key": "k1", "value": "v", "rsc-source-stream": "{orders:v1:0}",
                                    "rsc-source-id": "5-0", "rsc-group": "billing",
                                    "rsc-deliveries": "3", "rsc-error": "crashed",
                                    "rsc-member": "m-1", "rsc-dead-at-ms": "1700"})
        tab.page.goto(group_url(coordinator, "orders", "billing"))
        tab.page.fill("#token", "s3cret")
        tab.page.press("#token", "Enter")
        expect()(tab.page.locator("#dead-letter-count")).to_have_text("(1)", timeout=WAIT_MS)
        expect()(tab.page.locator("#dead-letters-line")).to_contain_text("crashed 1")
        mark_page(tab)
        tab.page.click("#action-redrive button")  # the dry run answers first, nothing moves yet
        confirm(tab, f"dead letter {dead!s} -> {{orders:v1:0}}", "group epoch")
        result(tab, "redriveDeadLetters: OK")
        expect()(tab.page.locator("#dead-letter-count")).to_have_text("(0)", timeout=WAIT_MS)
        assert client.xlen(stream) == 0 and client.xlen("{orders:v1:0}") == 1
        assert same_document(tab)
        mine = [e for e in audit_entries(coordinator, "s3cret") if e.get("via") == "console"
                and e["request"] is not None]
        assert [e["request"]["type"] for e in mine] == ["redriveDeadLetters"]  # not the dry run
        assert mine[0]["request"]["dryRun"] is False and mine[0]["status"] == "OK"
        tab.no_errors()
    finally:
        client.close()

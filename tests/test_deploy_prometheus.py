"""deploy/prometheus/ and deploy/grafana/ with the real tools.

- `promtool check rules` on rules.yml and `promtool test rules` on its unit tests, each alert
  with a case that fires and one that stays silent.
- A real Prometheus (Debian's `prometheus`) scrapes a real coordinator (`--metrics-port`) and a
  real `rsc consume` (`--metrics-port`) on loopback, with the rules of rules.yml at a sixtieth
  of their durations (a minute there is a second here: `scaled_rules`, derived from the file,
  which keeps the production values). The group's only consumer is SIGSTOPped past its lease
  while `rsc produce` writes, and a reshard starts: the group has no live member, and
  `RscGroupWithoutMembers` fires, as Prometheus's HTTP API shows. (The consumer's own lag
  cannot be scraped from a stopped process, so `RscLagGrowing` is left to the unit tests.)
- Every query of the Grafana dashboard is evaluated by that Prometheus, at a moment when the
  consumer ran and at the end: no query may fail, and every metric it names must be one the
  scraped processes expose.

Everything runs on loopback at free ports and is stopped by its pid.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import attrs
import pytest
import yaml

from rsc.actors.app import Readiness
from rsc.actors.ops.metrics import CoordinatorMetrics
from rsc.common.redis_server import EmbeddedRedis
from tests.deploy_tools import ROOT, tool
from tests.redis_rigs import server_binary

PROMETHEUS = ROOT / "deploy" / "prometheus"
RULES = PROMETHEUS / "rules.yml"
RULE_TESTS = sorted((PROMETHEUS / "tests").glob("*.yml"))
DASHBOARD = ROOT / "deploy" / "grafana" / "rsc.json"
TIMINGS = ("--tick-interval-ms", "100", "--lease-ttl-ms", "2000", "--heartbeat-interval-ms", "300")
SCALE = 60  # rules.yml's minutes are the scenario's seconds
_DURATION = re.compile(r"^(\d+)(ms|s|m|h|d|w)$")
_UNIT_S = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_RANGE = re.compile(r"\[(\d+(?:ms|s|m|h|d|w))\]")


def alerts_of(rules: dict[str, Any]) -> list[dict[str, Any]]:
    return [rule for group in rules["groups"] for rule in group["rules"] if "alert" in rule]


# --- promtool ------------------------------------------------------------------------------


def test_promtool_checks_the_rules():
    done = subprocess.run([tool("promtool"), "check", "rules", str(RULES)], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(alerts_of(yaml.safe_load(RULES.read_text())))} rules found" in done.stdout


def test_promtool_unit_tests_of_the_rules_pass():
    done = subprocess.run([tool("promtool"), "test", "rules", *map(str, RULE_TESTS)],
                          capture_output=True, text=True, timeout=120, cwd=PROMETHEUS / "tests")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout and "FAILED" not in done.stdout + done.stderr


def test_every_alert_has_a_case_that_fires_and_one_that_stays_silent():
    names = {rule["alert"] for rule in alerts_of(yaml.safe_load(RULES.read_text()))}
    fires: set[str] = set()
    silent: set[str] = set()
    for path in RULE_TESTS:
        for case in yaml.safe_load(path.read_text())["tests"]:
            for check in case.get("alert_rule_test", ()):
                (fires if check.get("exp_alerts") else silent).add(check["alertname"])
    assert fires == names and silent == names


def test_a_rules_file_that_misses_its_expectations_fails_the_unit_tests(tmp_path):
    """The unit tests can fail: the rules with every `for:` halved no longer meet them."""
    rules = yaml.safe_load(RULES.read_text())
    for rule in alerts_of(rules):
        if "for" in rule:
            rule["for"] = f"{seconds(rule['for']) // 2}s"
    (tmp_path / "rules.yml").write_text(yaml.safe_dump(rules))
    tests = tmp_path / "tests"
    tests.mkdir()
    for path in RULE_TESTS:
        (tests / path.name).write_text(path.read_text())
    done = subprocess.run([tool("promtool"), "test", "rules", *(p.name for p in RULE_TESTS)],
                          capture_output=True, text=True, timeout=120, cwd=tests)
    assert done.returncode != 0 and "FAILED" in done.stdout + done.stderr


# --- the rules at test speed ---------------------------------------------------------------


def seconds(duration: str) -> int:
    match = _DURATION.match(duration)
    assert match, duration
    return round(int(match[1]) * _UNIT_S[match[2]])


def scaled_rules(text: str, factor: int = SCALE) -> dict[str, Any]:
    """rules.yml with every `for:` and every range `[d]` of its expressions divided by `factor`
    (at least a second); names, labels, annotations and thresholds unchanged."""

    def shorter(duration: str) -> str:
        return f"{max(1, round(seconds(duration) / factor))}s"

    rules = yaml.safe_load(text)
    for rule in alerts_of(rules):
        if "for" in rule:
            rule["for"] = shorter(rule["for"])
        rule["expr"] = _RANGE.sub(lambda match: f"[{shorter(match[1])}]", rule["expr"])
    return rules


def test_the_test_rules_are_rules_yml_at_a_sixtieth_of_its_durations(tmp_path):
    production = yaml.safe_load(RULES.read_text())
    fast = scaled_rules(RULES.read_text())
    assert [rule["alert"] for rule in alerts_of(fast)] == [rule["alert"] for rule in alerts_of(production)]
    for slow, quick in zip(alerts_of(production), alerts_of(fast), strict=True):
        assert (quick["labels"], quick["annotations"]) == (slow["labels"], slow["annotations"])
        if "for" in slow:
            assert seconds(quick["for"]) * SCALE == seconds(slow["for"])
        assert _RANGE.sub("[]", quick["expr"]) == _RANGE.sub("[]", slow["expr"])
    by_name = {rule["alert"]: rule for rule in alerts_of(fast)}
    assert by_name["RscGroupWithoutMembers"]["for"] == "15s"
    assert "[10s]" in by_name["RscLagGrowing"]["expr"] and "[60s]" in by_name["RscStoreWentBack"]["expr"]
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump(fast))
    done = subprocess.run([tool("promtool"), "check", "rules", str(path)], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_coordinator_exports_readiness_and_the_lease_at_scrape_time():
    metrics = CoordinatorMetrics()
    readiness = Readiness()
    metrics.follow_health(readiness)

    def sample(name: str) -> float | None:
        return metrics.registry.get_sample_value(name)

    assert (sample("rsc_coordinator_ready"), sample("rsc_coordinator_lease_held")) == (0.0, 0.0)
    readiness.lease_held(True)
    assert (sample("rsc_coordinator_ready"), sample("rsc_coordinator_lease_held")) == (1.0, 1.0)
    readiness.write_failed("Redis is down")
    assert (sample("rsc_coordinator_ready"), sample("rsc_coordinator_lease_held")) == (0.0, 1.0)


# --- a real Prometheus scraping a real coordinator and consumer ----------------------------


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_for(what: str, condition: Callable[[], Any], timeout_s: float) -> Any:
    """Poll `condition` until it returns something truthy (its value), at most `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.2)


@attrs.define
class Prometheus:
    url: str

    def api(self, path: str, **params: Any) -> Any:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        try:
            with urllib.request.urlopen(f"{self.url}/api/v1/{path}{query}", timeout=10) as response:
                body = json.load(response)
        except urllib.error.HTTPError as exc:  # 400/422: a query Prometheus refused, with its error
            body = json.load(exc)
        return body

    def query(self, expr: str, at: float | None = None) -> dict[str, Any]:
        params: dict[str, Any] = {"query": expr}
        if at is not None:
            params["time"] = f"{at:.3f}"
        return dict(self.api("query", **params))

    def value(self, expr: str) -> float | None:
        result = self.query(expr)["data"]["result"]
        return float(result[0]["value"][1]) if result else None

    def firing(self) -> list[dict[str, Any]]:
        return [alert for alert in self.api("alerts")["data"]["alerts"] if alert["state"] == "firing"]


@attrs.define
class Scenario:
    prometheus: Prometheus
    consumer_ran_at: float  # a moment (unix seconds) when the consumer was scraped and consuming
    fired: dict[str, Any]  # the RscGroupWithoutMembers alert as the API showed it


def _rsc(*args: str) -> list[str]:
    return [sys.executable, "-m", "rsc", *args]


def _stop(process: subprocess.Popen[Any]) -> None:
    """SIGCONT (it may be stopped), SIGTERM, wait; SIGKILL if it does not end."""
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGCONT)
    process.terminate()
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@pytest.fixture(scope="module")
def scenario(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scenario]:
    promtool, prometheus_binary = tool("promtool"), tool("prometheus")
    work = tmp_path_factory.mktemp("prometheus")
    processes: list[subprocess.Popen[Any]] = []

    def start(command: list[str], **kwargs: Any) -> subprocess.Popen[Any]:
        process = subprocess.Popen(command, cwd=ROOT, **kwargs)
        processes.append(process)
        return process

    with EmbeddedRedis(binary=server_binary()) as redis_server:
        try:
            coordinator_metrics, consumer_metrics, prometheus_port = free_port(), free_port(), free_port()
            coordinator = start(_rsc("coordinator", "--redis-url", redis_server.url, "--port", "0",
                                     "--metrics-port", str(coordinator_metrics), *TIMINGS),
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            assert coordinator.stdout is not None
            line = coordinator.stdout.readline()
            assert line.startswith("listening on "), line
            env = {**os.environ, "RSC_COORDINATOR_URL": line.split()[-1],
                   "RSC_REDIS_URL": redis_server.url}
            admin = lambda *args: subprocess.run(_rsc("admin", *args), env=env, cwd=ROOT,  # noqa: E731
                                                 capture_output=True, timeout=30, check=True)
            admin("set-shards", "orders", "billing", "2")
            consumer = start(_rsc("consume", "orders", "billing", "--metrics-port", str(consumer_metrics)),
                             env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

            rules = work / "rules.yml"
            rules.write_text(yaml.safe_dump(scaled_rules(RULES.read_text())))
            subprocess.run([promtool, "check", "rules", str(rules)], check=True, timeout=60,
                           capture_output=True)
            config = work / "prometheus.yml"
            config.write_text(yaml.safe_dump({
                "global": {"scrape_interval": "1s", "scrape_timeout": "900ms",
                           "evaluation_interval": "1s"},
                "rule_files": [str(rules)],
                "scrape_configs": [
                    {"job_name": "rsc-coordinator",
                     "static_configs": [{"targets": [f"127.0.0.1:{coordinator_metrics}"]}]},
                    {"job_name": "rsc-consumer",
                     "static_configs": [{"targets": [f"127.0.0.1:{consumer_metrics}"]}]}]}))
            start([prometheus_binary, f"--config.file={config}", f"--storage.tsdb.path={work / 'data'}",
                   f"--web.listen-address=127.0.0.1:{prometheus_port}", "--log.level=warn"],
                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            prometheus = Prometheus(f"http://127.0.0.1:{prometheus_port}")

            def ready() -> bool:
                try:
                    with urllib.request.urlopen(f"{prometheus.url}/-/ready", timeout=2) as response:
                        return response.status == 200
                except OSError:
                    return False

            def produce(count: int) -> None:
                subprocess.run(_rsc("produce", "orders"), input=b"".join(
                    b"key-%d\tvalue-%d\n" % (index, index) for index in range(count)), env=env,
                    cwd=ROOT, capture_output=True, timeout=60, check=True)

            wait_for("Prometheus to start", ready, 30)
            produce(50)
            # and enough scrapes of it for the dashboard's rates over 15 s at this moment
            wait_for("Prometheus to see the consumer handle 50 messages and hold both shards",
                     lambda: (prometheus.value("sum(rsc_member_processed_total)") or 0) >= 50
                     and prometheus.value('rsc_group_members{group="billing"}') == 1
                     and prometheus.value("sum(rsc_member_owned_shards)") == 2
                     and (prometheus.value("min(count_over_time(rsc_member_processed_total[15s]))")
                          or 0) >= 5, 40)
            consumer_ran_at = time.time()

            consumer.send_signal(signal.SIGSTOP)  # past its lease: the coordinator expires it
            produce(20)  # undelivered on version 1: the resharding below cannot drain it now
            admin("set-shards", "orders", "billing", "4")
            producer = start(_rsc("produce", "orders"), env=env, stdin=subprocess.PIPE,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            assert producer.stdin is not None
            written = 0

            def alert_fired() -> dict[str, Any] | None:
                nonlocal written
                assert producer.stdin is not None
                producer.stdin.write(b"key-%d\tlate-%d\n" % (written, written))  # keeps writing
                producer.stdin.flush()
                written += 1
                return next((alert for alert in prometheus.firing()
                             if alert["labels"]["alertname"] == "RscGroupWithoutMembers"
                             and alert["labels"].get("group") == "billing"), None)

            fired = wait_for("RscGroupWithoutMembers to fire", alert_fired, 45)
            producer.stdin.close()
            assert producer.wait(timeout=60) == 0  # every line written while the consumer was stopped
            yield Scenario(prometheus=prometheus, consumer_ran_at=consumer_ran_at, fired=fired)
        finally:
            for process in reversed(processes):
                _stop(process)


def test_the_no_live_member_alert_fires_when_the_only_consumer_stops(scenario):
    prometheus = scenario.prometheus
    assert scenario.fired["labels"] == {"alertname": "RscGroupWithoutMembers", "severity": "warning",
                                        "prefix": "orders", "group": "billing",
                                        "instance": scenario.fired["labels"]["instance"],
                                        "job": "rsc-coordinator"}
    assert "Group billing of prefix orders" in scenario.fired["annotations"]["description"]
    # why: the consumer is not answering scrapes, its lease ran out, and the group has shards
    assert prometheus.value('up{job="rsc-consumer"}') == 0
    assert prometheus.value('up{job="rsc-coordinator"}') == 1
    assert (prometheus.value('sum(rsc_member_expirations_total{group="billing"})') or 0) >= 1
    assert prometheus.value('rsc_group_shards{group="billing"}') == 6  # v1's 2 draining, v2's 4
    assert prometheus.value('rsc_migration_shards{prefix="orders"}') == 2
    assert prometheus.value('rsc_migration_drained_shards{prefix="orders"}') == 0
    # the coordinator holds its lease and is ready: its own alerts stay quiet
    names = {alert["labels"]["alertname"] for alert in prometheus.firing()}
    assert not names & {"RscNoCoordinatorLeaseHolder", "RscCoordinatorNotReady"}, names
    # every rule evaluated against the real series without an error
    rules = [rule for group in prometheus.api("rules")["data"]["groups"] for rule in group["rules"]]
    assert len(rules) == len(alerts_of(yaml.safe_load(RULES.read_text())))
    assert [(rule["name"], rule.get("lastError")) for rule in rules if rule["health"] != "ok"] == []


# --- the dashboard -------------------------------------------------------------------------

SUBSTITUTIONS = {"$__rate_interval": "15s", "$__interval": "5s", "$__range": "5m",
                 "$namespace": ".*", "$prefix": ".*", "$group": ".*"}
_METRIC = re.compile(r"\brsc_[a-z0-9_]+\b")
_LABEL_VALUES = re.compile(r"^label_values\((?P<selector>.+),\s*(?P<label>\w+)\)$")


def dashboard_queries(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    """(where, PromQL) of every panel target and every query variable, Grafana's own variables
    replaced by values Prometheus takes; `label_values(m, l)` as the query it makes."""

    def expand(expr: str) -> str:
        for name, value in SUBSTITUTIONS.items():
            expr = expr.replace(name, value)
        assert "$" not in expr, f"a dashboard variable this test does not know: {expr}"
        return expr

    found: list[tuple[str, str]] = []

    def walk(panels: list[dict[str, Any]]) -> None:
        for panel in panels:
            walk(panel.get("panels", []))
            for target in panel.get("targets", []):
                found.append((f"panel {panel['title']!r} {target['refId']}", expand(target["expr"])))

    walk(dashboard["panels"])
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            query = variable["query"]["query"] if isinstance(variable["query"], dict) else variable["query"]
            match = _LABEL_VALUES.match(query)
            assert match, query
            found.append((f"variable {variable['name']}",
                          expand(f"group by ({match['label']}) ({match['selector']})")))
    return found


def test_the_dashboard_queries_are_read_from_panels_and_variables():
    queries = dashboard_queries(json.loads(DASHBOARD.read_text()))
    assert len(queries) > 30
    assert ("variable group",
            'group by (group) (rsc_group_members{namespace=~".*", prefix=~".*"})') in queries
    assert all("$" not in expr for _, expr in queries)


def exposed_metrics(prometheus: Prometheus) -> set[str]:
    """Every metric name the scraped targets expose: the series Prometheus holds, and the
    metadata (# TYPE) of families with no series yet (a labelled counter nothing counted)."""
    names = set(prometheus.api("label/__name__/values")["data"])
    metadata = prometheus.api("targets/metadata", match_target='{job=~".+"}')["data"]
    names |= {entry["metric"] for entry in metadata}
    return names


def known(metric: str, exposed: set[str]) -> bool:
    family = re.sub(r"_(bucket|sum|count)$", "", metric)
    return metric in exposed or family in exposed


def test_every_dashboard_query_evaluates_in_prometheus_on_metrics_the_processes_expose(scenario):
    prometheus = scenario.prometheus
    exposed = exposed_metrics(prometheus)
    assert {"rsc_coordinator_ready", "rsc_group_members", "rsc_member_lag"} <= exposed
    failures: list[str] = []
    answered = 0
    for where, expr in dashboard_queries(json.loads(DASHBOARD.read_text())):
        unknown = [metric for metric in _METRIC.findall(expr) if not known(metric, exposed)]
        if unknown:
            failures.append(f"{where}: no scraped process exposes {unknown}")
        results = []
        for at in (scenario.consumer_ran_at, None):
            body = prometheus.query(expr, at)
            if body.get("status") != "success":
                failures.append(f"{where}: {body.get('errorType')}: {body.get('error')} in {expr}")
                break
            results.append(body["data"]["result"])
        answered += any(results)
    assert failures == []
    # most panels have data in this short run; the rest count what did not happen here
    # (refusals, D4 stalls, removals, dead letters)
    assert answered >= 0.6 * len(dashboard_queries(json.loads(DASHBOARD.read_text())))


def test_an_unknown_metric_or_a_broken_query_is_caught(scenario):
    prometheus = scenario.prometheus
    assert not known("rsc_no_such_metric", exposed_metrics(prometheus))
    body = prometheus.query("sum(rate(rsc_member_processed_total[1m])")
    assert body["status"] == "error" and body["errorType"] == "bad_data"


# --- a fleet that waits for routing: what K8 cannot restore ----------------------------------


def test_k8_a_prefix_waited_for_without_routing_fires_its_alert(tmp_path):
    """A store lost with its coordinator whose clients know nothing to present (they started
    after it: K8 has nothing to adopt): `rsc consume` asks for routing and waits, its probes
    not ready. A real Prometheus scraping the real coordinator fires `RscPrefixWithoutRouting`
    on its series (rules at a sixtieth of their durations); before K8 nothing fired."""
    promtool, prometheus_binary = tool("promtool"), tool("prometheus")
    processes: list[subprocess.Popen[Any]] = []

    def start(command: list[str], **kwargs: Any) -> subprocess.Popen[Any]:
        process = subprocess.Popen(command, cwd=ROOT, **kwargs)
        processes.append(process)
        return process

    with EmbeddedRedis(binary=server_binary()) as redis_server:
        try:
            coordinator_metrics, prometheus_port = free_port(), free_port()
            coordinator = start(_rsc("coordinator", "--redis-url", redis_server.url, "--port", "0",
                                     "--metrics-port", str(coordinator_metrics), *TIMINGS),
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            assert coordinator.stdout is not None
            line = coordinator.stdout.readline()
            assert line.startswith("listening on "), line
            env = {**os.environ, "RSC_COORDINATOR_URL": line.split()[-1],
                   "RSC_REDIS_URL": redis_server.url}
            start(_rsc("consume", "orders", "billing"), env=env, stdout=subprocess.DEVNULL,
                  stderr=subprocess.DEVNULL)
            rules = tmp_path / "rules.yml"
            rules.write_text(yaml.safe_dump(scaled_rules(RULES.read_text())))
            subprocess.run([promtool, "check", "rules", str(rules)], check=True, timeout=60,
                           capture_output=True)
            config = tmp_path / "prometheus.yml"
            config.write_text(yaml.safe_dump({
                "global": {"scrape_interval": "1s", "scrape_timeout": "900ms",
                           "evaluation_interval": "1s"},
                "rule_files": [str(rules)],
                "scrape_configs": [
                    {"job_name": "rsc-coordinator",
                     "static_configs": [{"targets": [f"127.0.0.1:{coordinator_metrics}"]}]}]}))
            start([prometheus_binary, f"--config.file={config}",
                   f"--storage.tsdb.path={tmp_path / 'data'}",
                   f"--web.listen-address=127.0.0.1:{prometheus_port}", "--log.level=warn"],
                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            prometheus = Prometheus(f"http://127.0.0.1:{prometheus_port}")

            def fired() -> set[str] | None:
                try:
                    names = {alert["labels"]["alertname"] for alert in prometheus.firing()}
                except OSError:
                    return None
                return names if "RscPrefixWithoutRouting" in names else None

            wait_for("RscPrefixWithoutRouting to fire", fired, 60)
            assert prometheus.value('rsc_prefix_without_routing{prefix="orders"}') == 1
        finally:
            for process in reversed(processes):
                _stop(process)

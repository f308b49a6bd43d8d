"""deploy/kubernetes/: every manifest validated against the Kubernetes schemas (offline,
kubernetes-validate --strict), the kustomization rendered (kubectl kustomize) and its output
validated again, and the promises of docs/operations/deploying.md read from the manifests.

kubernetes-validate ships the schemas of Kubernetes' own kinds only: the Kustomization and the
Prometheus operator's ServiceMonitor have none there. The ServiceMonitor is checked here
instead, against the Services it must select.
"""

from __future__ import annotations

import base64
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from rsc.member.config import MemberConfig
from tests.deploy_tools import ROOT, tool

KUBERNETES = ROOT / "deploy" / "kubernetes"
MANIFESTS = sorted(KUBERNETES.glob("*.yaml"))
WITHOUT_SCHEMA = {"Kustomization", "ServiceMonitor"}
_VERDICT = re.compile(r"^(?P<level>INFO|WARN|ERROR) (?P<file>\S+) (?P<text>.*)$")


def validate(*paths: Path) -> tuple[int, list[tuple[str, str, str]]]:
    done = subprocess.run([tool("kubernetes-validate"), "--strict", *map(str, paths)],
                          capture_output=True, text=True, timeout=300)
    verdicts = [(match["level"], match["file"], match["text"])
                for line in (done.stdout + done.stderr).splitlines()
                if (match := _VERDICT.match(line.strip()))]
    return done.returncode, verdicts


TOKENS = {"admin": "a" * 64, "member": "b" * 64}


def with_tokens(target: Path) -> Path:
    """A copy of deploy/kubernetes with tokens/admin and tokens/member written, as the docs have
    the operator write them (`openssl rand -hex 32 > tokens/admin`: a trailing newline)."""
    shutil.copytree(KUBERNETES, target, ignore=shutil.ignore_patterns("tokens"))
    (target / "tokens").mkdir()
    for name, token in TOKENS.items():
        (target / "tokens" / name).write_text(token + "\n")
    return target


def kustomize(directory: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([tool("kubectl"), "kustomize", str(directory)], capture_output=True,
                          text=True, timeout=120)


def render(directory: Path) -> list[dict[str, Any]]:
    done = kustomize(directory)
    assert done.returncode == 0, done.stderr
    return [document for document in yaml.safe_load_all(done.stdout) if document]


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    return render(with_tokens(tmp_path_factory.mktemp("deploy") / "kubernetes"))


def one(documents: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    [found] = [d for d in documents if d["kind"] == kind and d["metadata"]["name"] == name]
    return found


def test_every_manifest_passes_the_schemas_of_its_kind():
    returncode, verdicts = validate(*MANIFESTS)
    assert returncode == 0, verdicts
    passed = {Path(file).name for level, file, text in verdicts if level == "INFO" and "passed" in text}
    unchecked = {Path(file).name for level, file, text in verdicts if level == "WARN"}
    assert not [verdict for verdict in verdicts if verdict[0] == "ERROR"]
    kinds = {path.name: yaml.safe_load(path.read_text())["kind"] for path in MANIFESTS}
    assert passed == {name for name, kind in kinds.items() if kind not in WITHOUT_SCHEMA}
    assert unchecked == {name for name, kind in kinds.items() if kind in WITHOUT_SCHEMA}


def test_the_validator_refuses_an_unknown_field_and_a_wrong_type(tmp_path):
    deployment = yaml.safe_load((KUBERNETES / "coordinator-deployment.yaml").read_text())
    deployment["spec"]["replicas"] = "one"
    deployment["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["periodSecondz"] = 2
    broken = tmp_path / "broken.yaml"
    broken.write_text(yaml.safe_dump(deployment))
    returncode, verdicts = validate(broken)
    assert returncode != 0
    assert [level for level, _, _ in verdicts] == ["ERROR"]


def test_the_kustomization_renders_every_file_and_validates(rendered, tmp_path):
    listed = yaml.safe_load((KUBERNETES / "kustomization.yaml").read_text())["resources"]
    assert sorted(listed) == sorted(path.name for path in MANIFESTS if path.name != "kustomization.yaml")
    assert sorted((d["kind"], secret_name(d)) for d in rendered) == sorted(
        (kind, name) for kind, name in [
            ("Secret", "rsc-tokens"), ("Deployment", "rsc-coordinator"), ("Service", "rsc-coordinator"),
            ("PodDisruptionBudget", "rsc-coordinator"), ("StatefulSet", "rsc-consumer"),
            ("Service", "rsc-consumer"), ("PodDisruptionBudget", "rsc-consumer"),
            ("ServiceMonitor", "rsc")])
    assert all(d["metadata"]["labels"]["app.kubernetes.io/part-of"] == "rsc" for d in rendered)
    output = tmp_path / "rendered.yaml"
    output.write_text(yaml.safe_dump_all(rendered))
    returncode, verdicts = validate(output)
    assert returncode == 0 and not [v for v in verdicts if v[0] == "ERROR"], verdicts
    assert len([v for v in verdicts if v[0] == "INFO"]) == len(rendered) - 1  # all but the monitor


def secret_name(document: dict[str, Any]) -> str:
    """A generated Secret's name without the hash of its content that kustomize appends."""
    name = str(document["metadata"]["name"])
    return name.rsplit("-", 1)[0] if document["kind"] == "Secret" else name


def pods(rendered: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [d["spec"]["template"] for d in rendered if d["kind"] in ("Deployment", "StatefulSet")]


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    return {entry["name"]: entry.get("value", entry.get("valueFrom")) for entry in container["env"]}


def test_every_pod_runs_rsc_non_root_read_only_without_service_links(rendered):
    for template in pods(rendered):
        spec = template["spec"]
        assert spec["enableServiceLinks"] is False  # no <SERVICE>_PORT in the RSC_ namespace
        assert spec["securityContext"]["runAsNonRoot"] is True
        assert spec["securityContext"]["runAsUser"] == 10001  # the image's USER
        [container] = spec["containers"]
        assert container["image"] == "your-registry/rsc:0.3.0"
        context = container["securityContext"]
        assert context["readOnlyRootFilesystem"] is True and context["allowPrivilegeEscalation"] is False
        assert context["capabilities"]["drop"] == ["ALL"]
        assert {"requests", "limits"} <= set(container["resources"])
        assert [mount["mountPath"] for mount in container["volumeMounts"]] == ["/tmp"]
        ports = {port["name"] for port in container["ports"]}
        for probe in ("livenessProbe", "readinessProbe"):
            assert container[probe]["httpGet"]["port"] in ports, probe
        assert env_of(container)["RSC_LOG_FORMAT"] == "json"


def test_the_coordinator_is_one_replica_that_may_surge_and_never_starts_a_redis(rendered):
    deployment = one(rendered, "Deployment", "rsc-coordinator")
    assert deployment["spec"]["replicas"] == 1
    # the new pod waits for the lease (D5): it can only become ready once the old one is gone
    assert deployment["spec"]["strategy"] == {
        "type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 1}}
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    assert container["args"] == ["coordinator"]
    env = env_of(container)
    assert env["RSC_NO_EMBEDDED_REDIS"] == "1" and env["RSC_REDIS_URL"].startswith("redis")
    assert env["RSC_METRICS_PORT"] == "9100" and env["RSC_HOST"] == "0.0.0.0"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    assert ports == {"ws": 8765, "metrics": int(env["RSC_METRICS_PORT"])}


def test_the_tokens_come_from_the_secret(rendered):
    [secret] = [d for d in rendered if d["kind"] == "Secret"]
    name = secret["metadata"]["name"]
    assert secret_name(secret) == "rsc-tokens" and name != "rsc-tokens"  # hashed: pods restart on a change
    references = [value["secretKeyRef"] for template in pods(rendered)
                  for value in env_of(template["spec"]["containers"][0]).values()
                  if isinstance(value, dict) and "secretKeyRef" in value]
    assert {(ref["name"], ref["key"]) for ref in references} == {(name, "admin"), (name, "member")}
    written = {key: base64.b64decode(value).decode() for key, value in secret["data"].items()}
    assert written == {key: token + "\n" for key, token in TOKENS.items()}  # what the operator wrote


def test_b2_no_token_is_shipped_the_secret_needs_the_operators_files(tmp_path):
    """B2: without tokens/admin and tokens/member the kustomization does not render (nothing
    usable is shipped), and no shipped file holds a placeholder token."""
    bare = tmp_path / "kubernetes"
    shutil.copytree(KUBERNETES, bare, ignore=shutil.ignore_patterns("tokens"))
    done = kustomize(bare)
    assert done.returncode != 0 and "tokens/admin" in done.stderr
    shipped = [path for path in ROOT.joinpath("deploy").rglob("*") if path.is_file()
               and "tokens" not in path.relative_to(KUBERNETES.parent).parts]
    assert not [path for path in shipped if "replace-me" in path.read_text(errors="replace")]
    kustomization = (KUBERNETES / "kustomization.yaml").read_text()
    assert "openssl rand -hex 32 > deploy/kubernetes/tokens/admin" in kustomization


def test_the_coordinator_service_is_rsc_coordinator_and_reaches_its_pod(rendered):
    service = one(rendered, "Service", "rsc-coordinator")
    labels = one(rendered, "Deployment", "rsc-coordinator")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()
    assert {port["name"]: port["port"] for port in service["spec"]["ports"]} == {"ws": 8765, "metrics": 9100}
    consumer = one(rendered, "StatefulSet", "rsc-consumer")
    assert env_of(consumer["spec"]["template"]["spec"]["containers"][0])["RSC_COORDINATOR_URL"] == \
        "ws://rsc-coordinator:8765"


def test_consumers_are_static_members_with_d7_probes_and_time_to_drain(rendered):
    statefulset = one(rendered, "StatefulSet", "rsc-consumer")
    assert statefulset["spec"]["serviceName"] == "rsc-consumer"
    one(rendered, "Service", "rsc-consumer")
    spec = statefulset["spec"]["template"]["spec"]
    [container] = spec["containers"]
    env = env_of(container)
    assert env["RSC_INSTANCE_ID"] == {"fieldRef": {"fieldPath": "metadata.name"}}  # S1
    assert env["POD_IP"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    health_port = {port["name"]: port["containerPort"] for port in container["ports"]}["health"]
    assert int(env["RSC_HEALTH_PORT"]) == health_port
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}
    assert spec["terminationGracePeriodSeconds"] > MemberConfig.__attrs_attrs__.drain_timeout_s.default
    assert container["args"][:1] == ["consume"]


def test_each_disruption_budget_covers_its_pods(rendered):
    for name, kind in (("rsc-coordinator", "Deployment"), ("rsc-consumer", "StatefulSet")):
        budget = one(rendered, "PodDisruptionBudget", name)
        labels = one(rendered, kind, name)["spec"]["template"]["metadata"]["labels"]
        assert budget["spec"]["maxUnavailable"] == 1
        assert budget["spec"]["selector"]["matchLabels"].items() <= labels.items()


def test_the_service_monitor_scrapes_the_metrics_port_of_both_services(rendered):
    """The checks a schema would make, and that it selects what it should."""
    monitor = one(rendered, "ServiceMonitor", "rsc")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    [expression] = monitor["spec"]["selector"]["matchExpressions"]
    assert expression["operator"] == "In"
    services = [d for d in rendered if d["kind"] == "Service"]
    selected = [s for s in services if s["metadata"]["labels"].get(expression["key"]) in expression["values"]]
    assert {s["metadata"]["name"] for s in selected} == {"rsc-coordinator", "rsc-consumer"}
    [endpoint] = monitor["spec"]["endpoints"]
    assert set(endpoint) == {"port", "path", "interval"} and endpoint["path"] == "/metrics"
    assert re.fullmatch(r"\d+s", endpoint["interval"])
    for service in selected:
        assert endpoint["port"] in {port["name"] for port in service["spec"]["ports"]}

"""deploy/kubernetes/ used as a base: the Deploying page's own overlay rendered as an operator
would (`kubectl kustomize`), and the Redis components (a password from a Secret, Sentinel,
TLS) rendered over the base and validated against the Kubernetes schemas like the base."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy_tools import ROOT, tool
from tests.test_deploy_kubernetes import validate, with_tokens

PAGE = ROOT / "docs" / "operations" / "deploying.md"
COMPONENTS = ROOT / "deploy" / "kubernetes" / "components"


def kustomize(directory: Path) -> list[dict[str, Any]]:
    done = subprocess.run([tool("kubectl"), "kustomize", str(directory)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return [document for document in yaml.safe_load_all(done.stdout) if document]


def beside_a_checkout(tmp_path: Path, kustomization: str) -> Path:
    """`kustomization` in a directory of its own next to `rsc/` (a checkout: this one's
    deploy/kubernetes, with the token files the operator writes first, B2)."""
    with_tokens(tmp_path / "rsc" / "deploy" / "kubernetes")
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(kustomization)
    return overlay


def containers(documents: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [container for d in documents if d["kind"] in ("Deployment", "StatefulSet")
            for container in d["spec"]["template"]["spec"]["containers"]]


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    return {item["name"]: item.get("value", item.get("valueFrom")) for item in container["env"]}


def test_the_deploying_pages_overlay_sets_the_image_and_the_namespace(tmp_path):
    blocks = re.findall(r"```yaml\n(.*?)```", PAGE.read_text(), re.S)
    [page_overlay] = [block for block in blocks if "secretGenerator" in block and "resources" in block]
    overlay = beside_a_checkout(tmp_path, page_overlay)
    (overlay / "tokens.env").write_text("admin=" + "a" * 64 + "\nmember=" + "b" * 64 + "\n")
    rendered = kustomize(overlay)
    wanted = yaml.safe_load(page_overlay)["images"][0]
    images = {container["image"] for container in containers(rendered)}
    assert images == {f"{wanted['newName']}:{wanted['newTag']}"}, images
    assert {d["metadata"].get("namespace") for d in rendered} == {"streams"}


@pytest.mark.parametrize("components", [
    ("redis-password",), ("redis-sentinel",), ("redis-tls",),
    ("redis-sentinel", "redis-password"), ("redis-tls", "redis-password"),
])
def test_each_redis_component_renders_over_the_base_and_validates(tmp_path, components):
    listed = "".join(f"  - ../rsc/deploy/kubernetes/components/{name}\n" for name in components)
    overlay = beside_a_checkout(tmp_path, (
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
        "resources:\n  - ../rsc/deploy/kubernetes\ncomponents:\n" + listed))
    rendered = kustomize(overlay)
    output = tmp_path / "rendered.yaml"
    output.write_text(yaml.safe_dump_all(rendered))
    returncode, verdicts = validate(output)
    assert returncode == 0 and not [v for v in verdicts if v[0] == "ERROR"], verdicts
    pods = containers(rendered)
    assert len(pods) == 2
    for container in pods:
        env = env_of(container)
        if "redis-password" in components:
            assert env["RSC_REDIS_PASSWORD"] == {"secretKeyRef": {"name": "rsc-redis",
                                                                  "key": "password"}}
            assert "@" not in env["RSC_REDIS_URL"]  # the password is in no URL
        if "redis-sentinel" in components:
            assert env["RSC_REDIS_URL"].startswith("redis+sentinel://")
        if "redis-tls" in components:
            assert env["RSC_REDIS_URL"].startswith("rediss://")
            assert {"name": "redis-tls", "mountPath": "/etc/rsc/redis-tls",
                    "readOnly": True} in container["volumeMounts"]
            assert env["RSC_REDIS_CA_FILE"] == "/etc/rsc/redis-tls/ca.crt"


def test_the_example_consumer_does_not_print_payloads_into_its_logs():
    manifest = yaml.safe_load((ROOT / "deploy" / "kubernetes" / "consumer-statefulset.yaml").read_text())
    [container] = manifest["spec"]["template"]["spec"]["containers"]
    assert container["args"][0] == "consume" and "--no-output" in container["args"]


async def test_rsc_consume_no_output_handles_and_acks_without_printing(coordinator):
    import redis
    import trio

    from rsc.member.producer import open_producer
    from tests.test_member_support import set_shards

    streams = await set_shards(coordinator.url, "quiet", "billing", 1)
    async with open_producer(coordinator.url, coordinator.redis_url, "quiet") as producer:
        await producer.send_batch([("k", "secret-payload-1"), ("k", "secret-payload-2")])
    with trio.fail_after(60):
        done = await trio.run_process(
            [sys.executable, "-m", "rsc", "consume", "quiet", "billing", "--coordinator",
             coordinator.url, "--redis-url", coordinator.redis_url, "--no-output",
             "--max-messages", "2"],
            capture_stdout=True, capture_stderr=True, check=False, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout == b"" and b"secret-payload" not in done.stderr
    client = redis.Redis.from_url(coordinator.redis_url)
    try:  # both handled and acked: nothing pending
        assert client.xpending(streams[0], "billing")["pending"] == 0
        assert client.xinfo_groups(streams[0])[0]["entries-read"] == 2
    finally:
        client.close()

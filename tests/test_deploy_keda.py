"""deploy/keda/scaledobject.yaml (C4): validated offline against KEDA's own ScaledObject CRD.

The CRD is tests/fixtures/keda/keda.sh_scaledobjects.yaml, KEDA's generated
`config/crd/bases/keda.sh_scaledobjects.yaml` as published (Apache-2.0, see
tests/fixtures/keda/README.md). Its `openAPIV3Schema` is checked with jsonschema the way the
API server checks a structural schema with strict field validation: an unknown field is an
error (`additionalProperties: false` wherever the schema lists properties and allows no
others), `x-kubernetes-int-or-string` is an integer or a string. The query must name the gauge
the coordinator exports.
"""

from __future__ import annotations

import copy
import re
from typing import Any

import jsonschema
import pytest
import yaml

from rsc.actors.ops.group_lag import GroupLag
from rsc.actors.ops.metrics import CoordinatorMetrics
from tests.deploy_tools import ROOT

SCALED_OBJECT = ROOT / "deploy" / "keda" / "scaledobject.yaml"
CRD = ROOT / "tests" / "fixtures" / "keda" / "keda.sh_scaledobjects.yaml"


def strict(schema: Any) -> Any:
    """The CRD schema as jsonschema reads it, with the API server's strict field validation."""
    if isinstance(schema, list):
        return [strict(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: strict(value) for key, value in schema.items()
           if not key.startswith("x-kubernetes-") and key != "format"}
    if schema.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return out
    if "properties" in out and "additionalProperties" not in out:
        out["additionalProperties"] = False
    return out


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft7Validator:
    crd = yaml.safe_load(CRD.read_text())
    assert crd["kind"] == "CustomResourceDefinition" and crd["spec"]["group"] == "keda.sh"
    [version] = [v for v in crd["spec"]["versions"] if v["served"] and v["storage"]]
    assert version["name"] == "v1alpha1"
    schema = strict(version["schema"]["openAPIV3Schema"])
    schema["properties"]["metadata"] = {"type": "object"}  # ObjectMeta: Kubernetes' own schema
    return jsonschema.Draft7Validator(schema)


def errors(validator: jsonschema.Draft7Validator, document: dict[str, Any]) -> list[str]:
    return [error.message for error in validator.iter_errors(document)]


def test_c4_the_scaled_object_passes_kedas_crd_schema(validator):
    document = yaml.safe_load(SCALED_OBJECT.read_text())
    assert (document["apiVersion"], document["kind"]) == ("keda.sh/v1alpha1", "ScaledObject")
    assert errors(validator, document) == []


def test_c4_the_schema_check_refuses_an_unknown_field_and_a_wrong_type(validator):
    document = yaml.safe_load(SCALED_OBJECT.read_text())
    misspelt = copy.deepcopy(document)
    misspelt["spec"]["maxReplicas"] = 8
    wrong = copy.deepcopy(document)
    wrong["spec"]["minReplicaCount"] = "one"
    no_triggers = copy.deepcopy(document)
    no_triggers["spec"]["triggers"] = []
    assert any("maxReplicas" in message for message in errors(validator, misspelt))
    assert any("'one'" in message for message in errors(validator, wrong))
    assert errors(validator, no_triggers)


def test_c4_the_scaled_object_reads_the_lag_gauge_the_coordinator_exports():
    document = yaml.safe_load(SCALED_OBJECT.read_text())
    [trigger] = document["spec"]["triggers"]
    assert trigger["type"] == "prometheus"
    assert float(trigger["metadata"]["threshold"]) > float(trigger["metadata"]["activationThreshold"])
    names = set(re.findall(r"\b(rsc_[a-z_]+)\{", trigger["metadata"]["query"]))
    metrics = CoordinatorMetrics()
    metrics.set_group_lag([GroupLag("orders", "billing", 1, 0, 1000, 0)])
    exposed = metrics.exposition().decode()
    assert names == {"rsc_group_lag_seconds"}
    assert 'rsc_group_lag_seconds{group="billing",prefix="orders"} 1.0' in exposed
    assert document["spec"]["pollingInterval"] == 15  # the gauge's refresh

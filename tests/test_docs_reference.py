"""The docs cannot drift from the code: the generated reference pages are current, every protocol
rule id has its anchor in docs/protocol.md, and the docs point at nothing outside the repository.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "docs"))

import reference_gen  # noqa: E402

RULE_IDS = ([f"H{n}" for n in range(1, 15)] + [f"S{n}" for n in range(1, 7)]
            + [f"R{n}" for n in range(1, 6)] + ["A1"] + [f"G{n}" for n in range(1, 4)]
            + [f"T{n}" for n in range(1, 4)] + [f"D{n}" for n in range(1, 6)]
            + ["B1", "B2", "B5"]
            + ["B3"]
            + ["B4"]
            + ["B6"]
            + ["B7"]
            + ["L5"]
            + ["P1", "P2", "P3"]
            + ["L4"]
            + ["L1", "L2", "L3", "L6", "L7"]
            + [f"K{n}" for n in range(8, 12)]
            + ["C1", "C3", "C4"]
            + ["C2"])


def test_generated_reference_pages_are_current():
    stale = [str(page.relative_to(ROOT)) for page in reference_gen.stale_pages()]
    assert stale == [], f"run `python docs/reference_gen.py`: {stale} no longer match the code"


def test_a_changed_flag_makes_the_cli_page_stale(monkeypatch):
    current = reference_gen.render_cli()
    monkeypatch.setattr(reference_gen, "render_cli", lambda: current + "\n| `--new-flag` |\n")
    monkeypatch.setitem(reference_gen.PAGES, reference_gen.CLI_PAGE, reference_gen.render_cli)
    assert reference_gen.stale_pages() == [reference_gen.CLI_PAGE]


def test_the_cli_page_lists_every_command_and_flag():
    page = reference_gen.render_cli()
    for command in ("rsc coordinator", "rsc produce", "rsc consume", "rsc admin", "rsc demo",
                    "rsc admin set-retention", "rsc admin reset-offsets", "rsc admin watch"):
        assert f"## `{command}`" in page, command
    for flag in ("--lease-ttl-ms", "--max-group-size", "--metrics-host", "--cutover", "--max-age",
                 "--to-datetime", "--duration"):
        assert f"`{flag}" in page, flag


def test_the_metrics_page_lists_every_metric_of_both_sides():
    page = reference_gen.render_metrics()
    for name in ("rsc_group_members", "rsc_member_joins_total", "rsc_request_seconds",
                 "rsc_store_calls_abandoned_total", "rsc_gc_pause_seconds",
                 "rsc_member_processed_total", "rsc_member_lag", "rsc_member_in_flight"):
        assert f"`{name}`" in page, name


def test_the_gc_pause_histogram_row_names_the_registered_metric():
    from rsc.common import gc_policy as gc_control

    source = Path(gc_control.__file__).read_text(encoding="utf-8")
    assert f'"{reference_gen.GC_PAUSE[0]}"' in source


@pytest.mark.parametrize("rule", RULE_IDS)
def test_every_rule_id_has_an_anchor_in_the_protocol_page(rule):
    page = (ROOT / "docs" / "protocol.md").read_text(encoding="utf-8")
    assert re.search(rf"^#+ {rule} .*\{{#{rule.lower()}\}}$", page, re.MULTILINE), rule


OUTSIDE = "../" + "shared"  # spelled in two parts so this file does not name it itself


def test_nothing_in_the_repository_points_outside_it():
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True)
    offenders = [name for name in tracked.stdout.splitlines()
                 if (ROOT / name).is_file() and not (ROOT / name).is_symlink()
                 and OUTSIDE in (ROOT / name).read_text(encoding="utf-8", errors="replace")]
    assert offenders == []


def test_the_readme_stays_short():
    assert len((ROOT / "README.md").read_text(encoding="utf-8").splitlines()) <= 250


def test_the_configuration_tables_are_generated_and_go_stale_with_the_code(monkeypatch):
    page = reference_gen.render_configuration()
    assert "`RSC_LEASE_TTL_MS` | `--lease-ttl-ms`" in page
    assert "`RSC_NO_EMBEDDED_REDIS` | `--no-embedded-redis`" in page
    assert "| `rsc admin` | 1 |" in page
    monkeypatch.setattr(reference_gen, "render_exit_codes", lambda: "| changed |\n")
    monkeypatch.setitem(reference_gen.SECTIONS, "exit-codes", reference_gen.render_exit_codes)
    assert reference_gen.stale_pages() == [reference_gen.CONFIGURATION_PAGE]


def test_every_rsc_variable_the_code_reads_is_in_the_environment_table():
    table = reference_gen.render_environment()
    named = set()
    for folder in ("rsc", "actors", "member"):
        for path in (ROOT / folder).rglob("*.py"):
            if path.is_relative_to(ROOT / "rsc") and path.parent.name in ("actors", "member"):
                continue
            named |= set(re.findall(r'"(RSC_[A-Z0-9_]+)"', path.read_text(encoding="utf-8")))
    assert named, "the scan found the variables"
    missing = sorted(name for name in named if f"`{name}`" not in table)
    assert missing == [], f"read by the code, absent from the environment table: {missing}"


def python_page_names() -> dict[str, list[str]]:
    """The modules of docs/reference/python.md's `::: module` blocks and the members each lists."""
    page = (ROOT / "docs" / "reference" / "python.md").read_text(encoding="utf-8")
    names: dict[str, list[str]] = {}
    module = None
    for line in page.splitlines():
        if line.startswith("::: "):
            module = line[4:].strip()
            names[module] = []
        elif module is not None and line.strip().startswith("- "):
            names[module].append(line.strip()[2:])
    return names


def test_l6_the_python_api_page_names_every_public_name_with_its_import_path():
    import importlib

    import rsc.errors

    names = python_page_names()
    for module, members in names.items():
        imported = importlib.import_module(module)
        for member in members:
            assert hasattr(imported, member), f"{module}.{member} is on the page but not in the code"
    assert set(names["rsc.errors"]) == set(rsc.errors.__all__)  # the whole error family
    wanted = {"rsc.member.listener": {"listener", "Listener", "ListenerOptions"},
              "rsc.member.producer": {"open_producer", "Producer", "ProducerOptions"},
              "rsc.member.aio": {"listener", "AioListener", "open_producer", "AioProducer"},
              "rsc.member.sync": {"open_producer", "SyncProducer"},
              "rsc.admin.client": {"open_admin_client", "AdminClient"},
              "rsc.testing": {"RscKit"}}
    for module, members in wanted.items():
        assert members <= set(names.get(module, ())), module
    mkdocs = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    assert "- mkdocstrings:" in mkdocs and "reference/python.md" in mkdocs


@pytest.mark.parametrize("script", ["produce", "ack", "attempt"])
def test_the_protocol_page_inlines_the_scripts_as_the_package_has_them(script):
    """The page read on GitHub (no snippet extension there) shows each script whole, and the
    copy is the package's file (a member in another language loads what the page shows)."""
    page = (ROOT / "docs" / "protocol.md").read_text(encoding="utf-8")
    source = (ROOT / "rsc" / "common" / "scripts" / f"{script}.lua").read_text(encoding="utf-8")
    link = f"[`rsc/common/scripts/{script}.lua`]"
    assert link in page
    after = page[page.index(link):]
    block = after[after.index("```lua\n") + len("```lua\n"):]
    assert block[:block.index("```")] == source.rstrip("\n") + "\n"
    assert "--8<--" not in page  # nothing shown as an include line only


def test_the_protocol_page_answers_a_member_in_another_language():
    page = (ROOT / "docs" / "protocol.md").read_text(encoding="utf-8")
    notes = page[page.index("{#member-notes}"):page.index("## The Python library")]
    for topic in ("What renews the lease", "Leaving with -1", "`SYNC_METADATA` and `assignment`",
                  "`REVOKING` entries", "`retention`", "XAUTOCLAIM's third element",
                  "Consumer names", "Skipping [D5]"):
        assert topic in notes, topic
    heartbeat_example = page[page.index('{"type": "heartbeatResponse"'):]
    assert '"retention": {"mode"' in heartbeat_example[:heartbeat_example.index("```")]

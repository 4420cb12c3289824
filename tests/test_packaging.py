"""What a wheel of laneledger installs: one top-level package, ``laneledger``
(the services as ``laneledger.services``), every package of the source tree,
``py.typed``, console scripts that name importable functions, and a lean
core: the SDKs and the OpenTelemetry exporter only as extras."""

from __future__ import annotations

import configparser
import importlib
import re
import subprocess
import sys
import zipfile

import pytest
from source_copy import REPO, copy_sources

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    out = tmp_path_factory.mktemp("wheel")
    src = copy_sources(out / "src")
    # No build isolation: the venv's setuptools, no download.
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(out),
            str(src),
        ],
        capture_output=True,
        text=True,
        timeout=170,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (built,) = out.glob("laneledger-*.whl")
    return zipfile.ZipFile(built)


def source_packages() -> set[str]:
    """Every package directory of the source tree, by its installed name."""
    found = {
        ".".join(("laneledger", *p.parent.relative_to(REPO / "shared" / "laneledger").parts))
        for p in (REPO / "shared" / "laneledger").rglob("__init__.py")
    }
    found |= {
        ".".join(("laneledger", "services", *p.parent.relative_to(REPO / "services").parts))
        for p in (REPO / "services").rglob("__init__.py")
    }
    return {name.rstrip(".") for name in found}


def test_the_wheel_installs_only_laneledger(wheel):
    tops = {name.split("/", 1)[0] for name in wheel.namelist()}
    assert {top for top in tops if not top.endswith(".dist-info")} == {"laneledger"}


def test_the_wheel_holds_every_package_and_py_typed(wheel):
    names = set(wheel.namelist())
    packages = {name.rsplit("/", 1)[0].replace("/", ".") for name in names if name.endswith("/__init__.py")}
    assert packages == source_packages()
    assert "laneledger/py.typed" in names
    assert "laneledger/services/tail/console/index.html" in names


def test_console_scripts_name_importable_functions(wheel):
    (entry_points,) = [n for n in wheel.namelist() if n.endswith(".dist-info/entry_points.txt")]
    parser = configparser.ConfigParser()
    parser.read_string(wheel.read(entry_points).decode())
    scripts = dict(parser["console_scripts"])
    assert set(scripts) == {
        "laneledger",
        "laneledger-sequencer",
        "laneledger-tail",
        "laneledger-metrics",
        "laneledger-checkpoint",
        "laneledger-ingest",
    }
    for target in scripts.values():
        module, _, function = target.partition(":")
        assert module.startswith("laneledger.")
        assert callable(getattr(importlib.import_module(module), function)), target


# Packages only an adapter, the exporter or their tests need: never in the
# core install (issue 23: "each SDK and the exporter is an optional extra").
OPTIONAL = re.compile(r"^(openai-agents|claude-agent-sdk|langgraph.*|opentelemetry.*|arize-phoenix)$")
EXTRA = re.compile(r"""\bextra\s*==\s*["']([^"']+)["']""")


def requires_dist(wheel: zipfile.ZipFile) -> list[tuple[str, list[str]]]:
    """Each Requires-Dist of the wheel: its normalized name and the extras
    its marker names (none: the core install)."""
    (metadata,) = [n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")]
    found = []
    for line in wheel.read(metadata).decode().splitlines():
        if not line.startswith("Requires-Dist:"):
            continue
        requirement, _, marker = line.removeprefix("Requires-Dist:").partition(";")
        name = re.match(r"\s*([A-Za-z0-9._-]+)", requirement)
        assert name is not None, line
        found.append((re.sub(r"[-_.]+", "-", name.group(1)).lower(), EXTRA.findall(marker)))
    return found


def test_the_core_install_has_no_sdk_or_exporter(wheel):
    requires = requires_dist(wheel)
    core = {name for name, extras in requires if not extras}
    assert "nats-py" in core and "msgspec" in core  # the parsing sees the core
    assert sorted(name for name in core if OPTIONAL.match(name)) == []
    # Each adapter and the exporter is an extra of its own (and the tests' dev).
    by_extra: dict[str, set[str]] = {}
    for name, extras in requires:
        for extra in extras:
            by_extra.setdefault(extra, set()).add(name)
    assert by_extra["openai-agents"] == {"openai-agents"}
    assert by_extra["claude-agent"] == {"claude-agent-sdk"}
    assert by_extra["langgraph"] == {"langgraph-checkpoint"}
    assert by_extra["otel"] == {"opentelemetry-sdk", "opentelemetry-exporter-otlp-proto-http"}

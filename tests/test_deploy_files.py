"""The container files, the compose file, the Prometheus config and the code
agree: the commands exist, every variable set is one the service reads, and
the ports match. (No Docker engine here: these are static checks, plus each
service's own --help, which lists the variables it reads.)"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from docs_support import docs_hooks

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
SERVICES = {"sequencer": 8470, "tail": 8471, "metrics": 8472, "checkpoint": 8473, "ingest": 8476}


def compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def dockerfile(service: str) -> str:
    return (DEPLOY / f"{service}.Dockerfile").read_text()


def variables_read_by(service: str) -> set[str]:
    """What the service documents in --help: every option's LANELEDGER_* variable."""
    result = subprocess.run(
        [sys.executable, "-m", f"laneledger.services.{service}", "--help"],
        capture_output=True,
        timeout=60,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr
    return set(re.findall(r"env\s+(LANELEDGER_[A-Z0-9_]+)", result.stdout.decode()))


def dockerfile_env(text: str) -> dict[str, str]:
    block = re.search(r"^ENV (.*?)(?=^\S)", text, re.S | re.M)
    assert block, "no ENV"
    return dict(re.findall(r"(LANELEDGER_[A-Z0-9_]+)=(\S+)", block.group(1)))


@pytest.mark.parametrize("service", SERVICES)
def test_container_file_runs_the_service_as_a_user_with_a_healthcheck(service):
    text = dockerfile(service)
    assert f'CMD ["python", "-m", "laneledger.services.{service}"]' in text
    assert (ROOT / "services" / service / "__main__.py").exists()
    assert re.search(r"^USER (?!root)\w+", text, re.M), "runs as root"
    assert "HEALTHCHECK" in text and "/healthz" in text
    assert f"EXPOSE {SERVICES[service]}" in text


@pytest.mark.parametrize("service", SERVICES)
def test_every_variable_set_is_one_the_service_reads(service):
    reads = variables_read_by(service)
    env = dockerfile_env(dockerfile(service))
    assert set(env) <= reads, set(env) - reads
    assert env[f"LANELEDGER_{service.upper()}_PORT"] == str(SERVICES[service])
    spec = compose()["services"][service]
    assert set(spec.get("environment", {})) <= reads
    assert spec["build"]["dockerfile"] == f"deploy/{service}.Dockerfile"
    assert f"{SERVICES[service]}:{SERVICES[service]}" in spec["ports"]


def test_the_mcp_container_serves_laneledger_mcp_over_the_tail():
    """Not a NATS service: a client of the tail, configured by environment
    (what ``laneledger mcp --help`` reads), with a health check like the others."""
    text = dockerfile("mcp")
    assert 'CMD ["python", "-m", "laneledger.cli", "mcp", "--serve"]' in text
    assert re.search(r"^USER (?!root)\w+", text, re.M), "runs as root"
    assert "HEALTHCHECK" in text and "/healthz" in text and "EXPOSE 8475" in text
    result = subprocess.run(
        [sys.executable, "-m", "laneledger.cli", "mcp", "--help"], capture_output=True, timeout=60, cwd=ROOT
    )
    reads = set(re.findall(r"env\s+(LANELEDGER_[A-Z0-9_]+)", result.stdout.decode()))
    env = dockerfile_env(text)
    assert set(env) <= reads, set(env) - reads
    spec = compose()["services"]["mcp"]
    assert spec["build"]["dockerfile"] == "deploy/mcp.Dockerfile"
    assert set(spec["environment"]) <= reads and spec["environment"]["LANELEDGER_MCP_TAIL_URL"] == (
        f"http://tail:{SERVICES['tail']}"
    )
    assert env["LANELEDGER_MCP_LISTEN"].endswith(":8475") and "8475:8475" in spec["ports"]
    assert spec["depends_on"]["tail"]["condition"] == "service_healthy"
    assert spec["restart"] == "unless-stopped"
    host_ports = [p.split(":")[0] for svc in compose()["services"].values() for p in svc.get("ports", [])]
    assert len(host_ports) == len(set(host_ports)), "two containers publish one host port"


def test_compose_has_healthchecks_dependencies_and_restarts():
    services = compose()["services"]
    assert set(SERVICES) | {"nats", "prometheus"} <= set(services)
    assert "healthcheck" in services["nats"]
    for name in SERVICES:
        spec = services[name]
        assert spec["restart"] == "unless-stopped"
        assert spec["depends_on"]["nats"]["condition"] == "service_healthy"
        url = spec["environment"]["LANELEDGER_NATS_URL"]
        assert url.startswith(f"nats://{name}:"), "each service connects as its own NATS user"
    nats_conf = (DEPLOY / "nats.conf").read_text()
    for user in [*SERVICES, "producer"]:
        assert f"user: {user}" in nats_conf
        assert f"LANELEDGER_{user.upper()}_PASSWORD" in services["nats"]["environment"]


def test_prometheus_scrapes_every_service_at_its_port():
    config = yaml.safe_load((DEPLOY / "prometheus.yml").read_text())
    targets = {t for job in config["scrape_configs"] for sc in job["static_configs"] for t in sc["targets"]}
    standby = f"sequencer-standby:{SERVICES['sequencer']}"  # docker-compose's second sequencer
    assert targets == {f"{name}:{port}" for name, port in SERVICES.items()} | {standby}
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert standby in jobs["laneledger-sequencer"]["static_configs"][0]["targets"]
    assert "sequencer-standby" in compose()["services"], "the scraped standby is a compose service"
    mounts = compose()["services"]["prometheus"]["volumes"]
    for rule_file in config["rule_files"]:
        assert any(m.startswith(f"./deploy/{rule_file}:") for m in mounts), rule_file


@pytest.mark.parametrize("service", SERVICES)
def test_the_settings_page_lists_every_variable(service):
    page = (ROOT / "docs" / "settings.md").read_text()
    assert f"<!-- settings-table:{service} -->" in page
    table = docs_hooks().expand(f"<!-- settings-table:{service} -->")
    listed = set(re.findall(r"^\| `(LANELEDGER_[A-Z0-9_]+)`", table, re.M))
    assert listed == variables_read_by(service)


def test_the_readme_opens_with_the_two_commands():
    lines = (ROOT / "README.md").read_text().splitlines()
    block = lines[lines.index("```sh") + 1 : lines.index("```sh") + 3]
    assert [line.split("#")[0].strip() for line in block] == ["make run", "make test"]

"""laneledger's metrics as Prometheus sees them: a real ``prometheus`` scrapes
the real services and answers queries with the known workload's values;
``promtool`` lints every service's /metrics and checks and unit-tests the
alert rules; the Grafana dashboard and spec/metrics.md name only metrics that
exist. Prometheus and promtool come from Debian's ``prometheus`` package
(``make test`` installs it as root; see external_programs.py); without them
these tests skip."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from external_programs import PROMETHEUS, PROMTOOL
from failure_logs import show_log_on_failure
from metrics_support import (
    WORKLOAD_EVENTS,
    MetricsRunner,
    PrometheusProcess,
    build_workload,
    free_port,
    scrape,
    scrape_config_for_test,
)
from nats.aio.client import Client as NATS
from polling import eventually
from prometheus_client import CollectorRegistry
from sequencer_process import SequencerProcess
from service_process import REPO, ServiceProcess

from laneledger.contract import errors
from laneledger.sdk.client import LedgerClient, make_event
from laneledger.services.metrics.service import MetricsService
from laneledger.services.metrics.store import MetricsStore
from laneledger.services.sequencer.metrics import SequencerMetrics

DEPLOY = REPO / "deploy"
needs_promtool = pytest.mark.skipif(not PROMTOOL.found, reason=PROMTOOL.missing)
needs_prometheus = pytest.mark.skipif(not PROMETHEUS.found, reason=PROMETHEUS.missing)


def promtool(*args: str, stdin: str | None = None, cwd: Path = DEPLOY) -> subprocess.CompletedProcess:
    binary = PROMTOOL.path
    assert binary is not None
    return subprocess.run([binary, *args], input=stdin, cwd=cwd, capture_output=True, text=True, timeout=60)


async def drive(nats_url: str) -> int:
    """The known workload, plus one lane conflict and one idempotent replay
    (so the sequencer's labelled series exist); returns the last position."""
    async with await LedgerClient.connect(nats_url, timeout=5.0) as client:
        workload = await build_workload(client)
        await workload.run()
        agent = await client.ensure_actor("acme", "agent:conflicts", "agent")
        lane = await client.create_lane("acme", "s9", "r9", "racy", actor_id=agent.id)
        event = make_event(lane.id, "stream.text_delta", actor_id=agent.id, payload={"text": "a"})
        first = await client.append(lane, 0, [event], append_id="racy-1")
        again = await client.append(lane, 0, [event], append_id="racy-1")
        assert again.replayed
        with pytest.raises(errors.LaneConflict):
            await client.append(
                lane, 0, [make_event(lane.id, "stream.text_delta", actor_id=agent.id, payload={"text": "b"})]
            )
        return max(workload.last_position, first.positions[-1])


# -- promtool ------------------------------------------------------------------------


@needs_promtool
@pytest.mark.parametrize("service", ["sequencer", "metrics", "tail", "checkpoint"])
async def test_promtool_check_metrics_passes_on_every_service(
    service: str, nats_server, tmp_path: Path, request: pytest.FixtureRequest
):
    if not (REPO / "services" / service / "__main__.py").exists():
        pytest.skip(f"services.{service} has no entry point yet")
    seq: SequencerProcess = request.getfixturevalue("sequencer_proc")
    last = await drive(nats_server.url)
    if service == "sequencer":
        text = await scrape(seq.http_url)
    elif service == "metrics":
        async with MetricsRunner(nats_server.url, tmp_path / "metrics") as metrics:
            assert await metrics.wait_position(last) == last
            text = await scrape(metrics.url)
    else:
        # The conventions every service keeps: --nats, --data, --http-host, --http-port,
        # and a "laneledger-<name> ready http=URL" line. Run in tmp_path so
        # relative data defaults land there.
        proc = ServiceProcess(
            f"laneledger.services.{service}",
            [
                "--nats",
                nats_server.url,
                "--data",
                str(tmp_path / service),
                "--http-host",
                "127.0.0.1",
                "--http-port",
                "0",
            ],
            tmp_path,
            cwd=tmp_path,
            env={"LANELEDGER_DB": str(tmp_path / "ledger.db")},
        )
        show_log_on_failure(request, proc)
        proc.start()
        try:
            text = await scrape(proc.url)
        finally:
            proc.stop()
    assert "# TYPE laneledger_" in text
    result = promtool("check", "metrics", stdin=text)
    assert result.returncode == 0, result.stdout + result.stderr


@needs_promtool
def test_alert_rules_and_scrape_config_pass_promtool():
    checked = promtool("check", "rules", "alerts.yml")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    unit = promtool("test", "rules", "alerts.test.yml")
    assert unit.returncode == 0, unit.stdout + unit.stderr
    config = promtool("check", "config", "prometheus.yml")
    assert config.returncode == 0, config.stdout + config.stderr
    rules = (DEPLOY / "alerts.yml").read_text()
    for alert in (
        "LaneledgerSequencerDown",
        "LaneledgerNoSingleActiveSequencer",
        "LaneledgerMetricsConsumerLag",
        "LaneledgerUnresolvedAttemptsGrowing",
        "LaneledgerLaneConflictRateHigh",
        "LaneledgerCommittedStreamForeign",
    ):
        assert f"alert: {alert}" in rules
        assert f"alertname: {alert}" in (DEPLOY / "alerts.test.yml").read_text()


# -- a real Prometheus ---------------------------------------------------------------


@needs_prometheus
@pytest.mark.slow
async def test_prometheus_scrapes_the_known_workload(
    nats_server, sequencer_proc: SequencerProcess, tmp_path: Path, request: pytest.FixtureRequest
):
    async with MetricsRunner(nats_server.url, tmp_path / "metrics") as metrics:
        work = tmp_path / "prometheus"
        work.mkdir()
        config = scrape_config_for_test(
            (DEPLOY / "prometheus.yml").read_text(),
            {
                "sequencer:8470": sequencer_proc.http_url.removeprefix("http://"),
                "metrics:8472": metrics.url.removeprefix("http://"),
                # Not running in this test: addresses where nothing listens.
                "tail:8471": f"127.0.0.1:{free_port()}",
                "sequencer-standby:8470": f"127.0.0.1:{free_port()}",
                "checkpoint:8473": f"127.0.0.1:{free_port()}",
            },
        )
        (work / "prometheus.yml").write_text(config)
        shutil.copy(DEPLOY / "alerts.yml", work / "alerts.yml")
        prometheus = PrometheusProcess(work / "prometheus.yml", work)
        show_log_on_failure(request, prometheus)  # duck-typed: log_path + log_text()
        await prometheus.start()
        try:
            last = await drive(nats_server.url)
            assert await metrics.wait_position(last) == last

            expected = {
                'sum(laneledger_cost_total{tenant="acme", currency="USD"})': 0.1123,
                'sum(laneledger_cost_credited_total{tenant="acme"})': 0.05,
                'sum(laneledger_cost_total{currency="EUR"})': 1.5,
                'sum(laneledger_tokens_total{direction="input"})': 1630,
                'sum(laneledger_tokens_total{direction="cache_read"})': 4096,
                "sum(laneledger_events_total)": WORKLOAD_EVENTS + 1,
                'sum(laneledger_events_total{family="extension"})': 1,
                'sum(laneledger_attempts_unresolved{tenant="acme"})': 1,
                "sum(laneledger_attempts_failed_total)": 1,
                'sum(laneledger_hitl_waiting{tenant="acme"})': 1,
                'sum(laneledger_runs_total{outcome="cancelled"})': 1,
                "sum(laneledger_checkpoints_linked_total)": 1,
                'sum(laneledger_action_duration_seconds_count{action_type="tool_call"})': 2,
                'sum(laneledger_action_duration_seconds_sum{name="shell"})': 1.5,
                "sum(laneledger_metrics_folded_position)": last,
                "sum(laneledger_metrics_consumer_lag_events)": 0,
                "sum(laneledger_sequencer_lane_conflicts_total)": 1,
                "sum(laneledger_sequencer_idempotent_replays_total)": 1,
                "sum(laneledger_sequencer_last_position)": last,
                'sum(up{job="laneledger-sequencer"})': 1,
                'sum(up{job="laneledger-metrics"})': 1,
            }

            async def query_all() -> dict[str, float | None]:
                found: dict[str, float | None] = {}
                for expr in expected:
                    result = await prometheus.query(expr)
                    found[expr] = float(result[0]["value"][1]) if result else None
                return found

            await eventually(
                query_all,
                until=lambda found: None not in found.values() and found == pytest.approx(expected, rel=1e-9),
                what=f"Prometheus to answer {expected}",
                interval=0.5,
            )

            rules = await prometheus.get("/api/v1/rules")
            names = {r["name"] for g in rules["data"]["groups"] for r in g["rules"]}
            assert {
                "LaneledgerSequencerDown",
                "LaneledgerMetricsConsumerLag",
                "LaneledgerUnresolvedAttemptsGrowing",
                "LaneledgerLaneConflictRateHigh",
            } <= names
        finally:
            prometheus.stop()


# -- dashboard and spec --------------------------------------------------------------


def exposed_metric_names(tmp_path: Path) -> set[str]:
    """Every sample name the sequencer's and the metrics service's /metrics
    can carry (families with no sample yet included)."""
    registry = CollectorRegistry()
    SequencerMetrics(registry)
    MetricsService(NATS(), MetricsStore(tmp_path / "names.db"), registry)  # not started
    names: set[str] = set()
    for family in registry.collect():
        match family.type:
            case "counter":
                names.add(f"{family.name}_total")
            case "histogram":
                names.update(f"{family.name}{s}" for s in ("_bucket", "_count", "_sum"))
            case _:
                names.add(family.name)
    return names


def test_grafana_dashboard_is_valid_and_names_existing_metrics(tmp_path: Path):
    dashboard = json.loads((DEPLOY / "grafana-dashboard.json").read_text())
    assert dashboard["title"] and dashboard["uid"]
    panels = dashboard["panels"]
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    exposed = exposed_metric_names(tmp_path) | {"up"}
    used: set[str] = set()
    for panel in panels:
        assert {"h", "w", "x", "y"} <= panel["gridPos"].keys(), panel["title"]
        if panel["type"] == "row":
            continue
        assert panel["targets"], f"panel {panel['title']!r} has no query"
        for target in panel["targets"]:
            for name in re.findall(r"\b(laneledger_[a-z0-9_]+|up)\b", target["expr"]):
                assert name in exposed, f"panel {panel['title']!r} queries unknown metric {name}"
                used.add(name)
    # Every ledger metric family is on some panel.
    families = {re.sub(r"_(total|bucket|count|sum)$", "", n) for n in exposed}
    shown = {re.sub(r"_(total|bucket|count|sum)$", "", n) for n in used}
    assert families - shown - {"up"} == set()


def test_spec_documents_every_metric(tmp_path: Path):
    spec = (REPO / "spec" / "metrics.md").read_text()
    for name in sorted(exposed_metric_names(tmp_path)):
        base = re.sub(r"_(bucket|count|sum)$", "", name)
        assert f"`{base}`" in spec, f"spec/metrics.md does not document {base}"

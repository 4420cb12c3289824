"""Service settings: flags over LANELEDGER_* variables over defaults; a bad
value stops the service with exit status 2 and names the variable."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from laneledger.runtime.config import Setting, common_settings, parse_settings, port, positive_int

SETTINGS = [*common_settings("demo", 9000), Setting("--batch-size", "BATCH_SIZE", 5, positive_int)]


def test_defaults_env_and_flags(monkeypatch):
    monkeypatch.delenv("LANELEDGER_DEMO_PORT", raising=False)
    monkeypatch.delenv("LANELEDGER_BATCH_SIZE", raising=False)
    assert parse_settings("x", None, SETTINGS, []).http_port == 9000
    monkeypatch.setenv("LANELEDGER_DEMO_PORT", "9100")
    monkeypatch.setenv("LANELEDGER_BATCH_SIZE", "7")
    args = parse_settings("x", None, SETTINGS, [])
    assert (args.http_port, args.batch_size) == (9100, 7)
    assert parse_settings("x", None, SETTINGS, ["--http-port", "0"]).http_port == 0


@pytest.mark.parametrize(
    ("env", "value"),
    [("LANELEDGER_DEMO_PORT", "70000"), ("LANELEDGER_BATCH_SIZE", "0"), ("LANELEDGER_BATCH_SIZE", "many")],
)
def test_a_bad_value_exits_2_naming_the_variable(monkeypatch, capsys, env, value):
    monkeypatch.setenv(env, value)
    with pytest.raises(SystemExit) as stopped:
        parse_settings("x", None, SETTINGS, [])
    assert stopped.value.code == 2
    assert capsys.readouterr().err.startswith(f"x: {env}={value!r}: ")


def test_the_sequencer_refuses_a_bad_variable():
    env = dict(os.environ, LANELEDGER_REPLICAS="three")
    result = subprocess.run(
        [sys.executable, "-m", "laneledger.services.sequencer"], env=env, capture_output=True, timeout=60
    )
    assert result.returncode == 2
    assert result.stderr.decode().strip() == (
        "laneledger-sequencer: LANELEDGER_REPLICAS='three': invalid literal for int() with base 10: 'three'"
    )


def test_a_service_refuses_a_bad_log_level():
    env = dict(os.environ, LANELEDGER_LOG_LEVEL="loud")
    result = subprocess.run(
        [sys.executable, "-m", "laneledger.services.metrics"], env=env, capture_output=True, timeout=60
    )
    assert result.returncode == 2
    assert result.stderr.decode().strip() == (
        "laneledger-metrics: LANELEDGER_LOG_LEVEL='loud': not a log level "
        "(DEBUG, INFO, WARNING, ERROR, CRITICAL)"
    )


@pytest.mark.parametrize("service", ["tail", "checkpoint"])
def test_services_using_the_sdk_refuse_a_bad_redaction_pattern(service):
    # They have no redaction flags, but the SDK they append and command
    # through reads the variables; a bad one stops them at start.
    env = dict(os.environ, LANELEDGER_REDACT_PATTERNS='{"x": "("}')
    result = subprocess.run(
        [sys.executable, "-m", f"laneledger.services.{service}"], env=env, capture_output=True, timeout=60
    )
    assert result.returncode == 2
    assert result.stderr.decode().startswith(
        f'laneledger-{service}: LANELEDGER_REDACT_PATTERNS=\'{{"x": "("}}\': '
    )
    assert "Traceback" not in result.stderr.decode()


def test_port_parser():
    assert port("0") == 0 and port("65535") == 65535
    with pytest.raises(ValueError, match=r"a port is 0\.\.65535"):
        port("-1")


def test_a_repeated_setting_reads_each_flag_or_the_variables_words(monkeypatch, capsys):
    keys = [Setting("--key", "KEYS", (), positive_int, repeated=True)]
    monkeypatch.delenv("LANELEDGER_KEYS", raising=False)
    assert parse_settings("x", None, keys, []).key == ()
    assert parse_settings("x", None, keys, ["--key", "1", "--key", "22"]).key == (1, 22)
    monkeypatch.setenv("LANELEDGER_KEYS", " 3\n4  5 ")
    assert parse_settings("x", None, keys, []).key == (3, 4, 5)
    assert parse_settings("x", None, keys, ["--key", "6"]).key == (6,)  # the flag wins
    monkeypatch.setenv("LANELEDGER_KEYS", "3 zero")
    with pytest.raises(SystemExit) as stopped:
        parse_settings("x", None, keys, [])
    assert stopped.value.code == 2 and capsys.readouterr().err.startswith("x: LANELEDGER_KEYS='3 zero': ")

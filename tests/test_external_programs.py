"""tests/external_programs.py's Node check: the TypeScript SDK's tests run
only on a node at least ``SDK_TS_NODE`` (Debian 12's nodejs 18 is too old),
judged from what a real ``node --version`` process prints (a stand-in
script on $PATH)."""

from __future__ import annotations

from pathlib import Path

import pytest
from external_programs import SDK_TS_NODE, node_version, sdk_ts_node_missing


def node_printing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, version: str) -> None:
    node = tmp_path / "node"
    node.write_text(f"#!/bin/sh\necho '{version}'\n")
    node.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))


def test_debian_12s_node_is_too_old_and_says_what_is_needed(tmp_path, monkeypatch):
    node_printing(tmp_path, monkeypatch, "v18.20.4")
    assert node_version() == (18, 20)
    reason = sdk_ts_node_missing()
    assert reason is not None and "is 18.20" in reason and "needs 20.19 or later" in reason


@pytest.mark.parametrize("version", ["v20.19.2", "v20.20.2", "v22.3.0"])
def test_a_node_new_enough_runs_the_tests(tmp_path, monkeypatch, version):
    node_printing(tmp_path, monkeypatch, version)
    assert node_version() is not None and node_version() >= SDK_TS_NODE
    assert sdk_ts_node_missing() is None


def test_a_node_that_does_not_answer_as_node_is_not_trusted(tmp_path, monkeypatch):
    node_printing(tmp_path, monkeypatch, "hello")
    assert node_version() is None
    assert "an unknown version" in (sdk_ts_node_missing() or "")


def test_no_node_is_the_install_command(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert sdk_ts_node_missing() == "no node on $PATH: apt-get install nodejs"

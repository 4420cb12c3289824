"""docs/performance.md's table is generated whole by bench/report.py from
bench/results/: a row edited by hand, dropped, or a stored result no bench
renders fails here. In-process: only files are read, no benchmark runs."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def report() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_report", ROOT / "bench" / "report.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_the_table_is_what_render_writes(report: ModuleType) -> None:
    page = report.PAGE.read_text()
    assert report.rendered(page) == page
    report.check(page)  # the same, as `bench/report.py --check` (make lint) runs it


def change_a_figure(page: str) -> str:
    """The table's first events/s figure with its first digit changed (the
    figure itself changes whenever the bench is rerun)."""
    return re.sub(
        r"(\| )(\d)([\d,]* events/s)",
        lambda m: f"{m[1]}{(int(m[2]) + 1) % 10}{m[3]}",
        page,
        count=1,
    )


@pytest.mark.parametrize(
    "edit",
    [
        pytest.param(change_a_figure, id="figure changed"),
        pytest.param(
            lambda page: page.replace(
                "|---|---|---|\n",
                "|---|---|---|\n| a row by hand | 1 event/s | `make bench` (2026-12-05) |\n",
            ),
            id="row added",
        ),
        pytest.param(
            lambda page: re.sub(r"\n\| RFC 8785 encoding[^\n]*", "", page, count=1), id="row dropped"
        ),
    ],
)
def test_a_hand_edited_table_fails_the_check(report: ModuleType, edit) -> None:
    page = report.PAGE.read_text()
    edited = edit(page)
    assert edited != page  # the edit took: the table holds what it changes
    with pytest.raises(SystemExit, match=r"not what `bench/report.py --render` writes"):
        report.check(edited)


def test_every_stored_result_is_a_bench_and_its_command(report: ModuleType) -> None:
    benches = {bench.name: bench for bench in report.BENCHES}
    stored = sorted(report.RESULTS.glob("*.json"))
    assert stored
    for path in stored:
        assert path.stem in benches, path.name
        record = json.loads(path.read_text())
        assert {"command", "at", "machine", "result"} <= record.keys(), path.name
        args = benches[path.stem].args
        if args is None:  # measured by hand: how is said in the record
            assert record.get("note"), path.name
        else:  # the row names the command that `make bench` runs again
            assert record["command"] == " ".join([".venv/bin/python", *args]), path.name


def test_a_result_no_bench_renders_stops_the_render(
    report: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    results = tmp_path / "results"
    shutil.copytree(report.RESULTS, results)
    (results / "renamed-bench.json").write_text((results / "canonical.json").read_text())
    monkeypatch.setattr(report, "RESULTS", results)
    with pytest.raises(SystemExit, match="renamed-bench"):
        report.table()

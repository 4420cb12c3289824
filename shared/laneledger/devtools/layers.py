"""The layers of laneledger, as a contract ``make lint`` checks.

A package may import only packages of the layers below its own, never one
of its own layer nor above; and no module may import itself back through
others (no import cycle). Bottom to top:

0. ``contract``: the wire contract, no I/O
1. ``sqlite``: how every SQLite file is opened, its errors translated
2. ``tlog``: the transparency log and its tree
3. ``store`` (the SQLite ledger) and ``sdk`` (the producer SDK): neither
   knows the other; the SDK reaches the ledger over NATS only
4. ``runtime`` (what the services share), ``history`` (causal graph,
   rewind, fork), ``laneledger`` itself (the public API, re-exported from
   ``sdk`` and ``contract``)
5. ``audit``, ``compat``, ``otel``, ``devtools``
6. ``adapters`` (built on ``compat``'s Korg mapping)
7. ``cli`` and each service (``services.<name>``): none imports another

Imports under ``TYPE_CHECKING`` and inside functions count: a dependency
hidden from the import-time graph is a dependency still.

Inside a package, ``INNER_LAYERS`` may layer its modules too: the tail's
(``services.tail``) are the wire's Structs, then its projections (one per
read-model table), the read model composing them, what the handlers share,
the handlers, and the app; a module there may import its own layer and
those below, never above.

The packages of ``WITHOUT_SQL`` hold no SQL: none of their modules imports
a SQLite driver, calls ``execute``, or holds SQL text. The tail's handlers
are one: a query is the projection's that owns the table it reads.

Checked by the AST, not by importing (no third-party tool): it sees every
import statement, runs in milliseconds, and names the file that broke the
rule. ``python -m laneledger.devtools.layers`` prints each violation and
exits 1 when there is any.
"""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

LAYERS: tuple[frozenset[str], ...] = (
    frozenset({"contract"}),
    frozenset({"sqlite"}),
    frozenset({"tlog"}),
    frozenset({"store", "sdk"}),
    frozenset({"runtime", "history", "laneledger"}),
    frozenset({"audit", "compat", "otel", "devtools"}),
    frozenset({"adapters", "mcp"}),
    frozenset(
        {"cli", "services"}
        | {f"services.{name}" for name in ("checkpoint", "ingest", "metrics", "sequencer", "tail")}
    ),
)

# Layers inside a package, bottom to top, by the name under it (a module or
# a subpackage): a module may import its own layer's and those below.
INNER_LAYERS: dict[str, tuple[frozenset[str], ...]] = {
    "laneledger.services.tail": (
        frozenset({"answers", "queries"}),  # the wire: parameters and answers as Structs, no I/O
        frozenset({"projections"}),  # one module per read-model table: DDL, fold, queries
        frozenset({"readmodel"}),  # the SQLite file, composing the projections
        frozenset(  # what the handlers share: the live feed, limits, streaming, owners
            {
                "api",
                "budget",
                "feed",
                "limits",
                "metrics",
                "owners",
                "pagestream",
                "rewinds",
                "routes",
                "streaming",
                "tlogfollow",
            }
        ),
        frozenset({"handlers"}),  # the HTTP handlers, one module per family of routes
        frozenset({"routetable", "service", "__main__"}),  # the app, its document, the process
    ),
}

# Packages whose modules hold no SQL (``sql_violations``).
WITHOUT_SQL = ("laneledger.services.tail.handlers",)
_SQL_DRIVERS = frozenset({"sqlite3", "aiosqlite"})
_SQL_TEXT = re.compile(r"\b(SELECT|INSERT INTO|UPDATE|DELETE FROM|CREATE (TABLE|INDEX)|PRAGMA)\s")
_SQL_CALLS = frozenset({"execute", "executemany", "executescript"})

# Where each top-level package's sources are, relative to the repository.
SOURCES = {"laneledger": Path("shared/laneledger"), "laneledger.services": Path("services")}


def modules(sources: Mapping[str, Path]) -> dict[str, tuple[Path, bool]]:
    """Every module under ``sources`` (package name → directory): its dotted
    name → (file, whether it is a package's ``__init__``)."""
    found: dict[str, tuple[Path, bool]] = {}
    for package, directory in sources.items():
        for path in sorted(directory.rglob("*.py")):
            parts = [*package.split("."), *path.relative_to(directory).with_suffix("").parts]
            is_package = parts[-1] == "__init__"
            found[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return found


def imports_of(name: str, path: Path, is_package: bool, known: Mapping[str, object]) -> Iterator[str]:
    """The modules of ``known`` that module ``name`` imports: ``from a import b``
    is module ``a.b`` when that is one, else ``a``; relative imports resolved."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names if alias.name in known)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".")[: len(name.split(".")) - node.level + is_package]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            submodules = [
                f"{target}.{alias.name}" for alias in node.names if f"{target}.{alias.name}" in known
            ]
            yield from submodules
            if target in known and len(submodules) < len(node.names):
                yield target


def unit_of(module: str) -> str:
    """The layered unit a module belongs to: ``laneledger.store.writer`` →
    ``store``, ``laneledger.services.tail.feed`` → ``services.tail``."""
    parts = module.split(".")[1:]
    if not parts:
        return "laneledger"
    return ".".join(parts[:2]) if parts[0] == "services" and len(parts) > 1 else parts[0]


def layer_violations(graph: Mapping[str, set[str]], layers: Sequence[frozenset[str]]) -> list[str]:
    """Each import from a unit to one of its own layer or above, and each unit
    in no layer."""
    level = {unit: index for index, layer in enumerate(layers) for unit in layer}
    found = []
    for module, targets in sorted(graph.items()):
        unit = unit_of(module)
        if unit not in level:
            found.append(f"{module}: {unit} is in no layer (laneledger.devtools.layers.LAYERS)")
            continue
        for target in sorted(targets):
            other = unit_of(target)
            if other != unit and level.get(other, len(layers)) >= level[unit]:
                found.append(
                    f"{module} imports {target}: {unit} (layer {level[unit]}) may import only "
                    f"layers below it, and {other} is in layer {level.get(other, '?')}"
                )
    return found


def inner_violations(
    graph: Mapping[str, set[str]], inner: Mapping[str, Sequence[frozenset[str]]]
) -> list[str]:
    """Each import inside a layered package (``INNER_LAYERS``) from a module
    to one of a layer above its own, and each module of it in no layer."""
    found = []
    for package, package_layers in inner.items():
        level = {name: index for index, layer in enumerate(package_layers) for name in layer}

        def part(module: str, package: str = package) -> str | None:
            """The name under ``package`` that ``module`` is or is in."""
            if not module.startswith(package + "."):
                return None
            return module[len(package) + 1 :].split(".")[0]

        for module, targets in sorted(graph.items()):
            name = part(module)
            if name is None:
                continue
            if name not in level:
                found.append(
                    f"{module}: {name} is in no layer of {package} (laneledger.devtools.layers.INNER_LAYERS)"
                )
                continue
            for target in sorted(targets):
                other = part(target)
                if other is not None and level.get(other, -1) > level[name]:
                    found.append(
                        f"{module} imports {target}: inside {package}, {name} (layer {level[name]}) "
                        f"may import only its layer and those below, and {other} is in layer {level[other]}"
                    )
    return found


def sql_in(path: Path) -> Iterator[tuple[int, str]]:
    """``(line, what)`` of each SQLite import, ``execute`` call and SQL text
    (a string, or a piece of an f-string) in the module at ``path``, in order."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    for node in sorted(ast.walk(tree), key=lambda n: (getattr(n, "lineno", 0), getattr(n, "col_offset", 0))):
        if isinstance(node, ast.Import | ast.ImportFrom):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            for name in names:
                if name.split(".")[0] in _SQL_DRIVERS:
                    yield node.lineno, f"imports {name}"
        elif isinstance(node, ast.Attribute) and node.attr in _SQL_CALLS:
            yield node.lineno, f"calls {node.attr}"
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and _SQL_TEXT.search(node.value):
            yield node.lineno, "holds SQL text"


def sql_violations(found: Mapping[str, tuple[Path, bool]], packages: Sequence[str]) -> list[str]:
    """Each SQLite import, ``execute`` call and SQL text in a module of ``packages``."""
    return [
        f"{name}:{line}: {what}, and {package} holds no SQL (its queries are the projections')"
        for package in packages
        for name, (path, _) in sorted(found.items())
        if name == package or name.startswith(package + ".")
        for line, what in sql_in(path)
    ]


def cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """The import cycles (strongly connected modules, sorted)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []
    for start in sorted(graph):  # Tarjan's algorithm, iteratively
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        while work:
            module, targets = work[-1]
            target = next((t for t in targets if t in graph), None)
            if target is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[module])
                if low[module] == index[module]:
                    component = stack[stack.index(module) :]
                    del stack[stack.index(module) :]
                    if len(component) > 1 or module in graph[module]:
                        found.append(sorted(component))
            elif target not in index:
                index[target] = low[target] = len(index)
                stack.append(target)
                work.append((target, iter(sorted(graph[target]))))
            elif target in stack:
                low[module] = min(low[module], index[target])
    return found


def violations(root: Path, sources: Mapping[str, Path] = SOURCES) -> list[str]:
    """Everything wrong with the tree at ``root``: forbidden imports (between
    packages, then inside a layered one), SQL where there must be none, then cycles."""
    found = modules({package: root / directory for package, directory in sources.items()})
    graph = {
        name: set(imports_of(name, path, is_package, found)) - {name}
        for name, (path, is_package) in found.items()
    }
    return (
        layer_violations(graph, LAYERS)
        + inner_violations(graph, INNER_LAYERS)
        + sql_violations(found, WITHOUT_SQL)
        + ["import cycle: " + " <-> ".join(cycle) for cycle in cycles(graph)]
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    found = violations(Path(args[0] if args else "."))
    for line in found:
        print(line, file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())

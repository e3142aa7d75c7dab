"""The layers of the package and the direction of their imports (docs/layout.md).

Every ``import`` of a ``stream_release`` module is read from the source (also those inside
functions; not those under ``if TYPE_CHECKING:``, which run only for the type checker), and:

* each layer imports only the layers :data:`ALLOWED` names for it;
* no two modules import each other, directly or around a circle.

Three places import a module by its name at run time, which no ``import`` statement shows; the
last tests pin what they may name: the package's public API (``stream_release._EXPORTS``, any
module), the audit's verifier of each kind (``VERIFIERS``: only ``mechanisms.<kind>.audit``,
whose imports are checked here) and the registry's factories (``MECHANISMS``: only
``mechanisms.<kind>.mechanism``, loaded when a series uses that kind).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.paths import REPO

PACKAGE = REPO / "stream_release"

FOUNDATION = "foundation"
"""The modules at the package's root (not a folder): they import nothing of the package but
the errors and are importable from every layer: the errors, the kill points of the crash
matrix, the packages' names resolved on first use, the format of a release's files (its
models, which the audit parses with)."""

LAYERS = (
    # a module belongs to the first layer its name starts with
    FOUNDATION,
    "stream_release.core",
    "stream_release.config",
    "stream_release.io",
    "stream_release.history",
    "stream_release.mechanisms",
    "stream_release.pipeline",
    "stream_release.audit",
    "stream_release.report",
    "stream_release.stream",
    "stream_release.devtools",
    "stream_release.cli",
    "stream_release",
)

_FOUNDATION = {FOUNDATION}

ALLOWED: dict[str, set[str]] = {
    FOUNDATION: set(),
    # pure: no I/O, no settings file, nothing above it
    "stream_release.core": {FOUNDATION},
    "stream_release.config": {FOUNDATION, "stream_release.core"},
    "stream_release.io": _FOUNDATION | {"stream_release.core", "stream_release.config"},
    # the stores hold the core's linkage type (core.privacy.linkage)
    "stream_release.history": _FOUNDATION | {"stream_release.core", "stream_release.config"},
    "stream_release.mechanisms": _FOUNDATION
    | {
        "stream_release.core",
        "stream_release.config",
        "stream_release.io",
        "stream_release.history",
    },
    "stream_release.pipeline": _FOUNDATION
    | {
        "stream_release.core",
        "stream_release.config",
        "stream_release.io",
        "stream_release.history",
        "stream_release.mechanisms",
    },
    # independent of what it checks: its own file reading and arithmetic
    "stream_release.audit": {FOUNDATION},
    # reads the published files as the audit does, and runs it on them
    "stream_release.report": {FOUNDATION, "stream_release.audit"},
    "stream_release.stream": _FOUNDATION
    | {
        "stream_release.core",
        "stream_release.config",
        "stream_release.io",
        "stream_release.history",
        "stream_release.mechanisms",
        "stream_release.pipeline",
    },
    "stream_release.devtools": _FOUNDATION | {"stream_release.config"},
    "stream_release.cli": set(LAYERS),
    "stream_release": _FOUNDATION,  # the public API, resolved on first use (lazy_names)
}
"""Layer -> the layers it may import (besides itself)."""


def layer_of(module: str) -> str:
    if module.count(".") == 1 and not (PACKAGE / module.split(".")[1]).is_dir():
        return FOUNDATION
    return next(layer for layer in LAYERS if module == layer or module.startswith(layer + "."))


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(
    node: ast.AST, module: str, is_package: bool, *, typing: bool = False
) -> Iterator[str]:
    """The modules ``node`` imports; those under ``if TYPE_CHECKING:`` only with ``typing``."""
    for child in ast.iter_child_nodes(node):
        if not typing and isinstance(child, ast.If) and _is_type_checking(child):
            # the else branch runs: read its statements as a body of their own
            orelse = ast.Module(body=child.orelse, type_ignores=[])
            yield from _imports(orelse, module, is_package, typing=typing)
            continue
        if isinstance(child, ast.Import):
            yield from (alias.name for alias in child.names)
        elif isinstance(child, ast.ImportFrom):
            if child.level:
                base = module.split(".")
                base = base if is_package else base[:-1]
                base = base[: len(base) - child.level + 1]
                target = ".".join([*base, *([child.module] if child.module else [])])
            else:
                target = child.module or ""
            yield target
            # ``from package import module`` imports the module too
            yield from (f"{target}.{alias.name}" for alias in child.names)
        yield from _imports(child, module, is_package, typing=typing)


def import_graph(*, typing: bool = False) -> dict[str, set[str]]:
    """Module -> the package's modules it imports (with ``typing``, also for the type
    checker only)."""
    modules = {module_name(path): path for path in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(), str(path))
        targets = _imports(tree, name, path.name == "__init__.py", typing=typing)
        graph[name] = {t for t in targets if t in modules and t != name}
    return graph


GRAPH = import_graph()
TYPED_GRAPH = import_graph(typing=True)
"""The graph with the imports under ``if TYPE_CHECKING:``: a circle there is a circle in the
design even when it never runs."""


@pytest.mark.parametrize("module", sorted(GRAPH))
def test_a_module_imports_only_the_layers_below_it(module: str) -> None:
    layer = layer_of(module)
    allowed = ALLOWED[layer] | {layer}
    wrong = sorted(t for t in GRAPH[module] if layer_of(t) not in allowed)
    assert not wrong, f"{module} ({layer}) imports {wrong}; it may import {sorted(allowed)}"


def test_a_kinds_audit_imports_only_its_settings_and_the_core() -> None:
    # the independent audit runs it (stream_release.audit.mechanisms): no release code
    audits = [
        (module, targets)
        for module, targets in GRAPH.items()
        if module.startswith("stream_release.mechanisms.") and module.endswith(".audit")
    ]
    assert len(audits) == 3  # one per companion kind
    for module, targets in audits:
        own = module.rsplit(".", 1)[0]
        wrong = sorted(
            t
            for t in targets
            if layer_of(t) not in {"stream_release.core", FOUNDATION}
            and t not in {own, "stream_release.mechanisms"}
            and not t.startswith("stream_release.config.mechanisms")
        )
        assert not wrong, f"{module} imports {wrong}"


def test_foundation_imports_only_the_errors() -> None:
    foundation = [module for module in GRAPH if layer_of(module) == FOUNDATION]
    assert sorted(foundation) == [
        "stream_release.errors",
        "stream_release.faults",
        "stream_release.lazy_names",
        "stream_release.release_format",
        "stream_release.version",
    ]
    for module in foundation:
        assert GRAPH[module] <= {"stream_release.errors"}, module


def test_no_import_cycle_even_for_the_type_checker() -> None:
    # Tarjan's strongly connected components; a component of more than one module is a circle
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in TYPED_GRAPH[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for node in sorted(TYPED_GRAPH):
        if node not in index:
            visit(node)
    assert not circles, f"import circles: {circles}"


def test_the_graph_is_read_from_the_sources() -> None:
    # the rules above test something: the graph has the edges we know of
    assert "stream_release.core.privacy.breach" in GRAPH["stream_release.core.privacy.strategy"]
    assert "stream_release.pipeline.render" in GRAPH["stream_release.pipeline.publisher"]
    assert layer_of("stream_release.faults") == FOUNDATION
    assert layer_of("stream_release.devtools.datasets") == "stream_release.devtools"


def test_the_imports_by_name_at_run_time_reach_only_what_they_may() -> None:
    import stream_release
    from stream_release.audit.mechanisms import VERIFIERS
    from stream_release.mechanisms.registry import MECHANISMS

    assert set(stream_release._EXPORTS.values()) <= set(GRAPH)
    assert set(VERIFIERS) == set(MECHANISMS)
    for kind, registration in MECHANISMS.items():
        folder = registration.module.removesuffix(".mechanism")
        # the kind's own folder: its audit and its factory's module, nothing else
        assert folder.rsplit(".", 1)[0] == "stream_release.mechanisms", kind
        assert registration.module.endswith(".mechanism") and registration.module in GRAPH
        assert VERIFIERS[kind] == f"{folder}.audit" and VERIFIERS[kind] in GRAPH


def _documented_layout() -> list[str]:
    """The names the Layout page's block lists under ``stream_release/``."""
    text = (PACKAGE.parent / "docs" / "layout.md").read_text(encoding="utf-8")
    block = text.split("```", 2)[1]
    lines = block.splitlines()
    start = lines.index("stream_release/") + 1
    return [line.split()[0] for line in lines[start:] if line.startswith("  ") and line[2] != " "]


def test_the_documented_layout_is_the_tree() -> None:
    listed = _documented_layout()
    tree = sorted(
        p.name + ("/" if p.is_dir() else "")
        for p in PACKAGE.iterdir()
        if p.name != "__pycache__" and (p.is_dir() or p.suffix == ".py")
    )
    assert sorted(listed) == tree
    # the layers the page names are the ones this test holds the imports to
    assert {name.rstrip("/").removesuffix(".py") for name in listed} >= {
        layer.removeprefix("stream_release.") for layer in LAYERS[1:-1]
    }

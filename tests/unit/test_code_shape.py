"""Code a reader can find and hold in mind: none of the package's modules is over
:data:`MAX_LINES` lines, no function's cyclomatic complexity is over :data:`MAX_COMPLEXITY`
(as radon counts it; ruff's C901 in pyproject.toml holds the same limit on its own count as
the code is written), and the unit tests' folders mirror the package's."""

from __future__ import annotations

from support.paths import REPO

PACKAGE = REPO / "stream_release"
MAX_LINES = 600
MAX_COMPLEXITY = 20


def test_no_module_is_over_600_lines() -> None:
    sizes = {
        str(path.relative_to(PACKAGE)): len(path.read_text(encoding="utf-8").splitlines())
        for path in PACKAGE.rglob("*.py")
    }
    assert len(sizes) > 100  # the package's modules were found
    over = {name: lines for name, lines in sizes.items() if lines > MAX_LINES}
    assert not over, f"modules over {MAX_LINES} lines: {over}; split them by job"


def test_no_function_is_over_complexity_20() -> None:
    from radon.complexity import add_inner_blocks, cc_visit
    from radon.visitors import Function

    over, seen = {}, 0
    for path in sorted(PACKAGE.rglob("*.py")):
        blocks = add_inner_blocks(cc_visit(path.read_text(encoding="utf-8")))
        for block in (b for b in blocks if isinstance(b, Function)):  # methods and closures too
            seen += 1
            if block.complexity > MAX_COMPLEXITY:
                name = f"{path.relative_to(PACKAGE)}:{block.lineno} {block.fullname}"
                over[name] = block.complexity
    assert seen > 1000  # the package's functions were found
    assert not over, f"functions over complexity {MAX_COMPLEXITY}: {over}; split them by job"


def test_the_complexity_limit_is_configured() -> None:
    text = (PACKAGE.parent / "pyproject.toml").read_text(encoding="utf-8")
    assert '"C901"' in text and "max-complexity = 20" in text


def test_the_unit_tests_mirror_the_package() -> None:
    # tests/unit/<folder>/ tests stream_release/<folder>/ (deploy/: the repository's deploy/)
    unit = REPO / "tests" / "unit"
    folders = [
        p.relative_to(unit) for p in unit.rglob("*") if p.is_dir() and p.name != "__pycache__"
    ]
    assert folders
    for folder in folders:
        deploy = folder.parts[0] == "deploy"
        mirrored = REPO / "deploy" if deploy else REPO / "stream_release" / folder
        assert mirrored.is_dir(), f"tests/unit/{folder} mirrors no folder of the package"


REAL_SERVICES = (
    "redis_url",
    "redis_prefix",
    "redis_cluster",
    "kafka_bootstrap",
    "kafka_topics",
    "make_worker",
    "adult_worker",
    "release_kafka",
    "make_runner",
    'main(["demo"',
    "tansu_binary",
)
"""The fixtures that start or use the session's real Redis, Redis Cluster and Kafka
(``tests/conftest.py``, ``tests/integration/conftest.py``), and the streaming demo and the
by-hand recipe (docs/operations.md), which start their own broker and Redis."""


def test_integration_tests_are_those_with_a_real_redis_or_kafka() -> None:
    # the offline series (no service at all) are tests/offline/; the unit tests, tests/unit/
    integration = sorted((REPO / "tests" / "integration").glob("test_*.py"))
    assert integration
    for path in integration:
        text = path.read_text(encoding="utf-8")
        assert any(name in text for name in REAL_SERVICES), f"{path.name} uses no real service"
    for path in sorted((REPO / "tests" / "offline").glob("test_*.py")):
        text = path.read_text(encoding="utf-8")
        assert not any(name in text for name in REAL_SERVICES), f"{path.name} uses a service"

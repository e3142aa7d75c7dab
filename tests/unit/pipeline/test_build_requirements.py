"""The wheel's build hook (``setup.py``) runs :func:`stream_release.pipeline.warm_up.warm_up` in
pip's isolated build environment, which holds only ``[build-system] requires``: a module the
warm-up imports from outside them makes the hook fail, with a warning pip hides, and the wheel
ships no compiled kernels (the first demo then takes 40 s instead of 10). This runs the warm-up
with every other installed distribution hidden, as that environment would."""

from __future__ import annotations

import importlib.metadata as md
import subprocess
import sys
import textwrap
import tomllib

from packaging.requirements import Requirement
from support.paths import REPO

ROOT = REPO


def _closure(requirements: list[str]) -> set[str]:
    """Normalised names of the distributions ``requirements`` install, with their own
    requirements (extras and environment markers followed)."""
    seen: set[str] = set()
    todo = [(Requirement(text), ()) for text in requirements]
    while todo:
        requirement, extras = todo.pop()  # extras: those asked of the distribution requiring it
        if requirement.marker is not None and not any(
            requirement.marker.evaluate({"extra": extra}) for extra in (*extras, "")
        ):
            continue
        name = requirement.name.lower().replace("_", "-")
        key = f"{name}[{','.join(sorted(requirement.extras))}]"
        if key in seen:
            continue
        seen.add(key)
        try:
            dependencies = md.requires(requirement.name) or []
        except md.PackageNotFoundError:
            continue
        wanted = tuple(sorted(requirement.extras))
        todo += [(Requirement(text), wanted) for text in dependencies]
    return {key.partition("[")[0] for key in seen}


def test_the_kernel_warm_up_needs_only_the_build_requirements() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    distributions = _closure(pyproject["build-system"]["requires"])
    modules = sorted(
        module
        for module, owners in md.packages_distributions().items()
        if {owner.lower().replace("_", "-") for owner in owners} & distributions
    )
    code = textwrap.dedent(
        f"""
        import importlib.abc, sys

        ALLOWED = set({modules!r})

        class BuildEnvironment(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path, target=None):
                top = name.partition(".")[0]
                if (top in sys.stdlib_module_names or top in ALLOWED
                        or top in ("stream_release", "setuptools", "wheel", "pkg_resources")
                        # the interpreter's build data: stdlib, not in stdlib_module_names
                        or top.startswith("_sysconfigdata_")):
                    return None
                raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)

        sys.meta_path.insert(0, BuildEnvironment())
        from stream_release.pipeline.warm_up import warm_up
        warm_up()
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, (
        "the warm-up imports a module outside [build-system] requires (add its distribution "
        f"there):\n{done.stderr[-2000:]}"
    )

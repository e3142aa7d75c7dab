"""Build hook: the wheel carries the grouping kernels already compiled for this machine.

numba compiles a kernel the first time it runs and keeps it in a ``__pycache__`` beside the
source; the first ``stream-release demo`` after an install spent about 30 of its 43 s there.
``build_py`` here builds the package as usual, then runs
:func:`stream_release.pipeline.warm_up.warm_up`
on the built tree, so the compiled kernels (``*.nbi``, ``*.nbc``) are in the wheel and the first
run loads them (about 1 s). numba checks each one before use: the source file's SHA-256, the
numba version and this CPU; a wheel installed with another numba or on another CPU compiles on
first use, as without this hook. An editable install (``pip install -e``) compiles on first use
into the source tree; ``SR_BUILD_KERNELS=0`` skips the step.

Everything else is in ``pyproject.toml``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

WARM_UP = "from stream_release.pipeline.warm_up import warm_up; warm_up()"


class BuildPyWithKernels(build_py):
    """``build_py``, then the kernels compiled into the built package's ``__pycache__``."""

    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False) or os.environ.get("SR_BUILD_KERNELS") == "0":
            return
        built = Path(self.build_lib).resolve()
        env = {k: v for k, v in os.environ.items() if not k.startswith("NUMBA_")}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(built), env.get("PYTHONPATH")]))
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        started = time.perf_counter()
        done = subprocess.run(  # in the built tree: "-c" puts the working directory first
            [sys.executable, "-c", WARM_UP],
            cwd=built,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:  # the package still works: it compiles on first use
            self.warn(
                f"kernels not precompiled (they compile on first use):\n{done.stderr[-2000:]}"
            )
            return
        files = len(list(built.glob("stream_release/**/__pycache__/*.nb[ic]")))
        self.announce(
            f"compiled the kernels into the wheel: {files} files in "
            f"{time.perf_counter() - started:.0f} s",
            level=2,
        )


setup(cmdclass={"build_py": BuildPyWithKernels})

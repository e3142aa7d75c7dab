"""Progress of the long commands (``anonymize``, ``plan``, ``audit``, ``publish``) on stderr.

A bar (tqdm) when stderr is a terminal, nothing otherwise: a pipe, a file or CI gets the
commands' own output only. The library reports its steps through a plain callback,
:data:`Step`, and never imports this module.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from tqdm import tqdm

__all__ = ["Step", "progress", "shown", "ticking"]

Step = Callable[[int, int, str], None]
"""``step(done, total, what)``: ``done`` of ``total`` steps are finished, the last ``what``
(a release label, a setting's name)."""


def shown() -> bool:
    """Whether progress is shown: stderr is a terminal that draws (not ``TERM=dumb``)."""
    return sys.stderr.isatty() and os.environ.get("TERM") != "dumb"


@contextmanager
def progress(desc: str, unit: str) -> Iterator[Step]:
    """A :data:`Step` drawing a bar labelled ``desc`` counting ``unit`` on stderr, removed
    when the block ends (the command's own lines stay); a no-op unless :func:`shown`."""
    if not shown():
        yield _quiet
        return
    bar = tqdm(desc=desc, unit=unit, file=sys.stderr, leave=False, dynamic_ncols=True)

    def step(done: int, total: int, what: str) -> None:
        bar.total = total
        bar.n = done
        bar.set_postfix_str(what, refresh=False)
        bar.refresh()

    try:
        yield step
    finally:
        bar.close()


def _quiet(done: int, total: int, what: str) -> None:
    """The :data:`Step` of a run whose stderr is not a terminal: nothing drawn."""
    del done, total, what


@contextmanager
def ticking(desc: str, every_s: float = 1.0) -> Iterator[None]:
    """The seconds spent in the block, on a line labelled ``desc`` redrawn every ``every_s``
    seconds and removed when the block ends: a wait with no steps to count (``publish
    --wait``) is never silent; a no-op unless :func:`shown`."""
    if not shown():
        yield
        return
    bar = tqdm(desc=desc, bar_format="{desc}: {elapsed}", file=sys.stderr, leave=False)
    done = threading.Event()

    def tick() -> None:
        while not done.wait(every_s):
            bar.refresh()

    ticker = threading.Thread(target=tick, name="progress", daemon=True)
    ticker.start()
    try:
        yield
    finally:
        done.set()
        ticker.join()
        bar.close()

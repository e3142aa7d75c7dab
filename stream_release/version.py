"""The installed distribution's version (``stream-release --version``, ``sr_build_info``).

At the package's root: it imports nothing of the package, and every layer may import it.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

__all__ = ["__version__"]

try:
    __version__ = version("stream-release")
except PackageNotFoundError:  # a source tree on sys.path, not installed
    __version__ = "0+unknown"

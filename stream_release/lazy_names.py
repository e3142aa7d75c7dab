"""A package's public names imported from their modules on first use (PEP 562), so that
importing the package (or one of its modules, as the audit does) loads nothing else: the
``__getattr__`` and ``__dir__`` of :mod:`stream_release` and :mod:`stream_release.config`."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_names"]


def lazy_names(
    package: str, exports: Mapping[str, str], namespace: dict[str, Any]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` of ``package`` whose ``namespace`` is its globals:
    ``exports`` maps each public name to the module that defines it; a name is imported once,
    then kept in the namespace."""

    def getattr_(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def dir_() -> list[str]:
        return sorted(set(namespace) | set(namespace.get("__all__", ())))

    return getattr_, dir_

"""The public API of ``stream_release``: ``__all__`` is sorted, complete and resolvable (the
model is httpx's ``tests/test_exported_members.py``), and importing the package loads nothing
until a name is used."""

from __future__ import annotations

import subprocess
import sys
import types

import pytest

import stream_release


def test_all_is_sorted_and_unique() -> None:
    assert stream_release.__all__ == sorted(set(stream_release.__all__))


def test_every_exported_name_resolves_to_our_own_object() -> None:
    for name in stream_release.__all__:
        value = getattr(stream_release, name)
        if name == "__version__":
            assert isinstance(value, str) and value
            continue
        assert value.__module__.startswith("stream_release."), name
        assert value.__name__ == name


def test_nothing_public_is_left_out_of_all() -> None:
    for name in stream_release.__all__:
        getattr(stream_release, name)
    public = {
        name
        for name, value in vars(stream_release).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }
    assert public == set(stream_release.__all__) - {"__version__"}
    # what resolves lazily is exactly what is listed
    assert set(stream_release._EXPORTS) == set(stream_release.__all__) - {"__version__"}


def test_an_unknown_name_is_an_attribute_error() -> None:
    try:
        stream_release.no_such_name  # noqa: B018
    except AttributeError as exc:
        assert "no_such_name" in str(exc)
    else:
        raise AssertionError("an unknown name resolved")


def test_importing_the_package_or_the_audit_loads_no_planning_code() -> None:
    code = (
        "import sys, stream_release, stream_release.audit; "
        "print(sorted(m for m in sys.modules if m.startswith(('numba', 'stream_release.core', "
        "'stream_release.pipeline', 'stream_release.config'))))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_the_configurations_names_resolve_on_first_use() -> None:
    import stream_release.config as config

    assert set(config._EXPORTS) == set(config.__all__)
    for name in config.__all__:
        value = getattr(config, name)
        assert getattr(value, "__module__", "").startswith("stream_release.config."), name
    with pytest.raises(AttributeError, match="no attribute 'Setings'"):
        _ = config.Setings  # type: ignore[attr-defined]

r"""Kernels and parameter checks shared by the reconstruction-privacy modules of [WHF12].

Private to :mod:`stream_release.core.privacy.reconstruction` (definitions, caps),
:mod:`stream_release.core.privacy.reconstruction_check` (the test),
:mod:`stream_release.core.privacy.reconstruction_algorithm` (Algorithm 1) and
:mod:`stream_release.core.privacy.reconstruction_serial` (the serial rules): the sort of rows
into (group, code) runs, and the checks each public entry point runs once on its parameters
(each raises :class:`~stream_release.errors.InvalidParameter` naming the parameter).

[WHF12]: K. Wang, C. Han, A. W.-C. Fu, Randomization Resilient To Sensitive Reconstruction,
arXiv:1202.3179 (2012); full reference and digest in
:mod:`stream_release.core.privacy.reconstruction`.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from stream_release.core.privacy.validation import (
    check_domain_size,
    check_open_probability,
    check_positive,
)
from stream_release.errors import InvalidParameter

# --- shared kernels ----------------------------------------------------------------------------


@dataclass(frozen=True)
class _Runs:
    """Rows sorted by (group, code, tie-breakers); a run is one (group, code) block."""

    order: NDArray[np.intp]
    run_start: NDArray[np.int64]
    run_len: NDArray[np.int64]
    run_group: NDArray[np.int64]
    row_run: NDArray[np.int64]
    group_ids: NDArray[np.int64]
    group_first_run: NDArray[np.int64]
    size: NDArray[np.int64]


def _runs(group: NDArray[np.int64], codes: NDArray[np.int64], *tiebreak: ArrayLike) -> _Runs:
    """Sort rows (n >= 1) by group, code, then ``tiebreak`` keys in order."""
    n = group.shape[0]
    keys: list[NDArray[Any]] = [*(np.asarray(key) for key in reversed(tiebreak)), codes, group]
    order = np.lexsort(keys)
    g_sorted, c_sorted = group[order], codes[order]
    new_group = np.ones(n, dtype=bool)
    new_group[1:] = g_sorted[1:] != g_sorted[:-1]
    new_run = new_group.copy()
    new_run[1:] |= c_sorted[1:] != c_sorted[:-1]
    run_start = np.flatnonzero(new_run).astype(np.int64)
    run_len = np.diff(np.append(run_start, n)).astype(np.int64)
    row_run = (np.cumsum(new_run) - 1).astype(np.int64)
    group_start = np.flatnonzero(new_group)
    group_of_row = np.cumsum(new_group) - 1
    return _Runs(
        order=order,
        run_start=run_start,
        run_len=run_len,
        run_group=group_of_row[run_start].astype(np.int64),
        row_run=row_run,
        group_ids=g_sorted[group_start],
        group_first_run=row_run[group_start],
        size=np.diff(np.append(group_start, n)).astype(np.int64),
    )


def _group_max(per_run: NDArray[np.int64], runs: _Runs) -> NDArray[np.int64]:
    return np.maximum.reduceat(per_run, runs.group_first_run).astype(np.int64)


# --- validation ------------------------------------------------------------------------------


def _check_rng(rng: object) -> np.random.Generator:
    if not isinstance(rng, np.random.Generator):
        raise InvalidParameter(
            f"rng = {rng!r}: must be a numpy.random.Generator "
            "(e.g. np.random.default_rng(secrets.randbits(128)))"
        )
    return rng


def _check_choice(name: str, value: object, allowed: tuple[str, ...]) -> Any:
    if value not in allowed:
        raise InvalidParameter(f"{name} = {value!r}: must be one of {', '.join(allowed)}")
    return value


def _check_delta(delta: object) -> float:
    if isinstance(delta, numbers.Real) and not isinstance(delta, bool):
        if float(delta) == 1.0:
            raise InvalidParameter(
                "delta = 1: makes the cap 0, so no group can be published; use 0 < delta < 1 "
                "(e.g. delta = 0.3)"
            )
        if float(delta) == 0.0:
            raise InvalidParameter(
                "delta = 0: imposes no constraint (the cap is infinite); use plain "
                "perturbation, or 0 < delta < 1 (e.g. delta = 0.3)"
            )
    return check_open_probability(delta, "delta")  # type: ignore[arg-type]


def _check_frequency(f: object, name: str = "f") -> float:
    if isinstance(f, bool) or not isinstance(f, numbers.Real) or not 0.0 < float(f) <= 1.0:
        raise InvalidParameter(
            f"{name} = {f!r}: the maximum frequency in a group must lie in (0, 1]; f = 1 gives "
            "the data-independent cap (e.g. f = 1.0)"
        )
    return float(f)


def _check_epsilon_range(epsilon: float, p: float, m: int, f: float) -> None:
    top = 1.0 + (1.0 - p) / (m * p * f)
    if epsilon > top:
        raise InvalidParameter(
            f"epsilon = {epsilon!r}: Corollary 4.10 needs epsilon <= 1 + (1-p)/(m p f) = "
            f"{top:.6g} at p = {p}, m = {m}, f = {f} (theta <= 1); beyond it the lower tail "
            "is empty and no delta > 0 can hold (e.g. epsilon = 0.5)"
        )


def _check_cap_args(
    p: object, epsilon: object, delta: object, m: object, f: object, m_name: str = "m"
) -> tuple[float, float, float, int, float]:
    p_ = check_open_probability(p, "p")  # type: ignore[arg-type]
    eps = check_positive(epsilon, "epsilon")  # type: ignore[arg-type]
    d = _check_delta(delta)
    m_ = check_domain_size(m, m_name)  # type: ignore[arg-type]
    f_ = _check_frequency(f)
    _check_epsilon_range(eps, p_, m_, f_)
    return p_, eps, d, m_, f_


def _int_array(name: str, values: ArrayLike) -> NDArray[np.int64]:
    arr = np.asarray(values)
    if arr.ndim != 1:
        raise InvalidParameter(f"{name}: must be a 1-D integer array, got shape {arr.shape}")
    if arr.size and arr.dtype.kind not in "iu":
        raise InvalidParameter(f"{name}: must hold integer codes, got dtype {arr.dtype}")
    return arr.astype(np.int64, copy=False)


def _check_codes(codes: ArrayLike, m: int, name: str = "codes") -> NDArray[np.int64]:
    arr = _int_array(name, codes)
    if arr.size and (arr.min() < 0 or arr.max() >= m):
        raise InvalidParameter(
            f"{name}: codes must lie in [0, m) = [0, {m}), got [{arr.min()}, {arr.max()}]; "
            "encode every value of the full domain once, at ingestion"
        )
    return arr


def _check_rows(
    group: ArrayLike, codes: ArrayLike, m: int | None
) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    group_arr = _int_array("group", group)
    if m is None:
        codes_arr = _int_array("codes", codes)
        if codes_arr.size and codes_arr.min() < 0:
            raise InvalidParameter("codes: must be >= 0")
    else:
        codes_arr = _check_codes(codes, m)
    if group_arr.shape != codes_arr.shape:
        raise InvalidParameter(
            f"group has shape {group_arr.shape} but codes has shape {codes_arr.shape}"
        )
    return group_arr, codes_arr

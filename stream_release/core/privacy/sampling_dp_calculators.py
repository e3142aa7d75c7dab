r"""Calculator views of [LQS12]_: ``stream-release calc delta`` and ``calc amplify``.

Each ``calc_*`` returns a plain dict of its inputs and outputs (JSON-ready): :func:`calc_delta`
the :math:`d(k,\beta,\epsilon)` of :mod:`stream_release.core.privacy.sampling_dp` with its
bounds, :func:`calc_amplify` amplification by sampling
(:func:`~stream_release.core.privacy.sampling_dp_budget.amplify`).

[LQS12]_: N. Li, W. Qardaji, D. Su, On Sampling, Anonymization, and Differential Privacy,
ASIACCS 2012; [LQS11]_: its earlier version, Provably Private Data Anonymization
(arXiv:1101.2604v1); full references in :mod:`stream_release.core.privacy.sampling_dp`.
"""

from __future__ import annotations

import math

import numpy as np

from stream_release.core.privacy.sampling_dp import (
    _d_kernel,
    _odds_r,
    _plateau_ends,
    _validated,
    log_delta_chernoff,
)
from stream_release.core.privacy.sampling_dp_budget import amplify
from stream_release.core.privacy.validation import check_beta, check_delta, check_epsilon

__all__ = ["calc_amplify", "calc_delta"]


# --- calculators (stream-release calc ...) -------------------------------------------------------


def calc_delta(k: int, beta: float, epsilon: float) -> dict[str, float | int | bool]:
    r"""Everything ``stream-release calc delta --k K --beta B --epsilon E`` reports.

    Theorem 3.9 of [LQS12]_ (δ), Theorem 6 of [LQS11]_ (Chernoff bound), Definition 3 of
    [LQS12]_ (DPS needs ``beta > delta``). Plain JSON-serialisable values:

    ``k, beta, epsilon``
        the inputs (validated);
    ``epsilon_min``
        :math:`-\ln(1-\beta)`;
    ``gamma``
        :math:`1 - (1-\beta)e^{-\epsilon}`;
    ``delta, log_delta, log10_delta``
        :math:`d(k,\beta,\epsilon)`, its natural and decimal log (``delta`` may underflow to
        0.0; the logs do not);
    ``argmax_n, n_m``
        the maximizing cell size and the paper's :math:`\lceil k/\gamma - 1\rceil`;
    ``delta_chernoff, log_delta_chernoff``
        the closed-form upper bound;
    ``delta_floor, log_delta_floor``
        :math:`\beta^k`, below which no δ is reachable;
    ``dps``
        ``delta < beta``, i.e. the release is :math:`(\beta,\epsilon,\delta)`-DPS.

    Examples
    --------
    >>> report = calc_delta(20, 0.1, 1.0)
    >>> report["argmax_n"], f"{report['delta']:.3g}", report["dps"]
    (29, '4.07e-14', True)
    """
    k, beta, epsilon = _validated(k, beta, epsilon)
    log_d, argmax_n = _d_kernel(k, beta, epsilon)
    n_m = int(_plateau_ends(np.array([k], dtype=np.int64), _odds_r(beta, epsilon))[0])
    log_chernoff = log_delta_chernoff(k, beta, epsilon)
    log_floor = k * math.log(beta)
    return {
        "k": k,
        "beta": beta,
        "epsilon": epsilon,
        "epsilon_min": -math.log1p(-beta),
        "gamma": -math.expm1(math.log1p(-beta) - epsilon),
        "delta": math.exp(log_d),
        "log_delta": log_d,
        "log10_delta": log_d / math.log(10.0),
        "argmax_n": argmax_n,
        "n_m": n_m,
        "delta_chernoff": math.exp(log_chernoff),
        "log_delta_chernoff": log_chernoff,
        "delta_floor": math.exp(log_floor),
        "log_delta_floor": log_floor,
        "dps": log_d < math.log(beta),
    }


def calc_amplify(epsilon: float, delta: float, beta: float) -> dict[str, float]:
    r"""Everything ``stream-release calc amplify --epsilon E --delta D --beta B`` reports.

    Theorem 1 of [LQS12]_ (see :func:`amplify`). Plain JSON-serialisable values: the inputs
    ``epsilon, delta, beta`` and the outputs ``epsilon_amplified, delta_amplified``.

    Examples
    --------
    >>> report = calc_amplify(1.0, 0.0, 0.1)
    >>> round(report["epsilon_amplified"], 3), report["delta_amplified"]
    (0.159, 0.0)
    """
    epsilon = check_epsilon(epsilon)
    delta = check_delta(delta)
    beta = check_beta(beta, allow_one=True)
    eps_out, delta_out = amplify(epsilon, delta, beta)
    return {
        "epsilon": epsilon,
        "delta": delta,
        "beta": beta,
        "epsilon_amplified": eps_out,
        "delta_amplified": delta_out,
    }

r"""Amplification by sampling and basic composition for sampled releases ([LQS12]_).

:func:`amplify`: an :math:`(\epsilon,\delta)`-DP mechanism run on a Bernoulli sample
(Theorem 1 of [LQS12]_); :func:`compose_basic`: a series of releases on fresh samples
([LQS12]_ §2.7). The release ``SDGS(D; g, k, beta)`` and its
:math:`d(k,\beta,\epsilon)` are in :mod:`stream_release.core.privacy.sampling_dp`.

[LQS12]_: N. Li, W. Qardaji, D. Su, On Sampling, Anonymization, and Differential Privacy,
ASIACCS 2012; [LQS11]_: its earlier version, Provably Private Data Anonymization
(arXiv:1101.2604v1); full references in :mod:`stream_release.core.privacy.sampling_dp`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from stream_release.core.privacy.sampling_dp import _EXPM1_MAX
from stream_release.core.privacy.validation import check_beta, check_delta, check_epsilon
from stream_release.errors import InvalidParameter

__all__ = ["amplify", "compose_basic"]


# --- amplification and composition --------------------------------------------------------------


def amplify(epsilon: float, delta: float, beta: float) -> tuple[float, float]:
    r"""Privacy of an :math:`(\epsilon,\delta)`-DP mechanism run on a Bernoulli sample.

    Theorem 1 of [LQS12]_ with :math:`\beta_1 = 1`: if A is :math:`(\epsilon,\delta)`-DP then
    :math:`A \circ \Lambda_\beta` is :math:`(\epsilon', \beta\delta)`-DP with

    .. math:: \epsilon' = \ln(1 + \beta(e^\epsilon - 1)),
              \quad\text{i.e.}\quad \frac{e^{\epsilon'} - 1}{e^\epsilon - 1} = \beta.

    ([LQS11]_ Theorem 3 / Corollary 4 has the :math:`\delta = 0` case only.)

    Parameters
    ----------
    epsilon : float
        Finite, ``>= 0``.
    delta : float
        In ``[0, 1]``.
    beta : float
        Sampling probability, ``0 < beta <= 1`` (``1`` returns the input unchanged).

    Returns
    -------
    (epsilon', delta') : tuple of float

    Notes
    -----
    Evaluated as ``log1p(beta * expm1(epsilon))``; above ``epsilon = 700`` (where ``expm1``
    overflows) as :math:`\epsilon + \ln(\beta + (1-\beta)e^{-\epsilon})`. Several DP
    mechanisms may share one sample if composed first and amplified once ([LQS12]_ §2.7);
    sampling must be Bernoulli.

    Examples
    --------
    Table 1 of [LQS12]_: :math:`(\ln 11, 10^{-5})` at beta = 0.1 becomes
    :math:`(\ln 2, 10^{-6})`.

    >>> eps, delta = amplify(math.log(11), 1e-5, 0.1)
    >>> round(math.exp(eps), 12), round(delta * 1e6, 12)
    (2.0, 1.0)
    """
    epsilon = check_epsilon(epsilon)
    delta = check_delta(delta)
    beta = check_beta(beta, allow_one=True)
    if beta == 1.0:
        return epsilon, delta
    if epsilon <= _EXPM1_MAX:
        eps_out = math.log1p(beta * math.expm1(epsilon))
    else:
        eps_out = epsilon + math.log(beta + (1.0 - beta) * math.exp(-epsilon))
    return eps_out, beta * delta


def compose_basic(budgets: Iterable[tuple[float, float]]) -> tuple[float, float]:
    r"""Basic composition of a series of :math:`(\epsilon_i, \delta_i)`-DP releases.

    :math:`(\sum_i \epsilon_i, \sum_i \delta_i)`, the composition [LQS12]_ §2.7 uses for
    releases on **fresh** samples (e.g. 50 releases of (0.02, 0) give (1, 0)). It does not
    apply to DPS-only mechanisms sharing one sample ([LQS12]_ §2.6; [LQS11]_ Theorem 2
    assumes independent samples).

    Parameters
    ----------
    budgets : iterable of (epsilon, delta)
        Each ``epsilon`` finite and ``>= 0``, each ``delta`` in ``[0, 1]``. Empty gives
        ``(0.0, 0.0)``.

    Returns
    -------
    (sum of epsilon, sum of delta) : tuple of float
        Summed with ``math.fsum``. The delta sum is not capped; a value ``>= 1`` is a
        vacuous guarantee.

    Examples
    --------
    >>> compose_basic([(0.02, 0.0)] * 50)
    (1.0, 0.0)
    """
    epsilons: list[float] = []
    deltas: list[float] = []
    for i, pair in enumerate(budgets):
        try:
            eps_i, delta_i = pair
        except (TypeError, ValueError) as exc:
            raise InvalidParameter(
                f"budgets[{i}] = {pair!r}: must be a pair (epsilon, delta)"
            ) from exc
        epsilons.append(check_epsilon(eps_i, f"budgets[{i}].epsilon"))
        deltas.append(check_delta(delta_i, f"budgets[{i}].delta"))
    return math.fsum(epsilons), math.fsum(deltas)

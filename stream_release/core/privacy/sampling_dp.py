r"""Random sampling + safe k-anonymization is :math:`(\epsilon, \delta)`-DP ([LQS12]_, [LQS11]_).

The release ``SDGS(D; g, k, beta)``: keep each record independently with probability ``beta``
(Bernoulli sampling :math:`\Lambda_\beta`), map every kept record through a generalization
``g`` fixed before the data is seen, and suppress every generalized tuple occurring fewer than
``k`` times. Theorem 3.9 of [LQS12]_ (Theorem 1 of [LQS11]_): for ``0 < beta < 1`` and every
:math:`\epsilon \ge -\ln(1-\beta)` this is :math:`(\epsilon, d(k,\beta,\epsilon))`-DP with

.. math::

    d(k,\beta,\epsilon) = \max_{n \ge \lceil k/\gamma - 1\rceil}
        \sum_{j > \gamma n}^{n} \binom{n}{j} \beta^j (1-\beta)^{n-j},
    \qquad \gamma = \frac{e^\epsilon - 1 + \beta}{e^\epsilon} = 1 - (1-\beta)e^{-\epsilon}.

Here ``n`` is the (adversarially chosen) number of records of D in the cell of the target
record ``t``, counting ``t``, and ``j`` the number of copies of that cell in the output.

What these modules provide (pure functions: no I/O, no clock, no global random state):

* the accounting, here: :func:`gamma`, :func:`epsilon_min`, :func:`delta_of` (with
  :func:`log_delta_of` and :func:`worst_group_size`), the Chernoff closed form
  :func:`delta_chernoff` (Theorem 6 of [LQS11]_), the :math:`\epsilon_1`-safe variant
  :func:`delta_of_eps_safe` (Theorem 3.11 of [LQS12]_);
* amplification by sampling (Theorem 1 of [LQS12]_) and basic composition, in
  :mod:`stream_release.core.privacy.sampling_dp_budget`: :func:`~stream_release.core.privacy.
  sampling_dp_budget.amplify`, :func:`~stream_release.core.privacy.sampling_dp_budget.
  compose_basic`;
* the two data steps of one release, in :mod:`stream_release.core.privacy.sampling_dp_release`:
  :func:`~stream_release.core.privacy.sampling_dp_release.sample_mask` (a fresh
  :math:`\Lambda_\beta`) and :func:`~stream_release.core.privacy.sampling_dp_release.
  safe_k_anonymize_mask` (k-suppression of generalized tuples);
* the calculators behind ``stream-release calc delta`` / ``calc amplify``, in
  :mod:`stream_release.core.privacy.sampling_dp_calculators`: :func:`~stream_release.core.
  privacy.sampling_dp_calculators.calc_delta` and :func:`~stream_release.core.privacy.
  sampling_dp_calculators.calc_amplify`, returning plain dicts.

Scope and sharp edges (see the digest ``seed-sampling-kanon-dp.md``)
---------------------------------------------------------------------
* Sampling must be Bernoulli (independent coins), fresh for every release. A DPS-only mechanism
  such as SDGS must be the only thing computed on its sample ([LQS12]_ §2.6); releases on
  fresh samples compose by :func:`~stream_release.core.privacy.sampling_dp_budget.compose_basic`
  ([LQS12]_ §2.7).
* ``g`` must not depend on the data (strongly-safe, Definition 3.7), or be chosen by an
  :math:`\epsilon_1`-DP mechanism (:func:`delta_of_eps_safe`).
* :math:`d \ge \beta^k` for every :math:`\epsilon`: a cell of exactly ``k`` records, all
  sampled, is published whole. ``k = 1`` gives :math:`d \ge \beta`, which is never
  :math:`(\beta,\epsilon,\delta)`-DPS (Definition 3 needs :math:`\beta > \delta`).
* Guarantees are per record; a person with several records needs group privacy.

References
----------
.. [LQS12] N. Li, W. Qardaji, D. Su. On Sampling, Anonymization, and Differential Privacy: Or,
   k-Anonymization Meets Differential Privacy. ASIACCS 2012 (arXiv:1101.2604).
.. [LQS11] N. Li, W. Qardaji, D. Su. Provably Private Data Anonymization: Or, k-Anonymity
   Meets Differential Privacy. Earlier version of [LQS12]_ (arXiv:1101.2604v1).
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray
from scipy.special import logsumexp, rel_entr
from scipy.stats import binom

from stream_release.core.privacy.validation import (
    check_beta,
    check_epsilon,
    check_k,
)
from stream_release.errors import InvalidParameter

#: A j within this relative distance of gamma*n counts as a bad output (ratio >= e^eps), so
#: rounding can only raise the reported delta, never lower it below the true d.
TIE_RTOL = 1e-12

#: Terms of each binomial tail that are summed. Above the threshold consecutive pmf terms
#: shrink by a factor < 1/2 (Notes of :func:`log_delta_of`), so the omitted rest is
#: < 2**-63 of the tail: below double precision.
_TAIL_TERMS = 64

#: Number of candidate thresholds J evaluated per vectorised block.
_BLOCK = 512

#: Largest worst-case cell size n evaluated. scipy's binom.logpmf is a difference of gammaln
#: values of size n log n, so its relative error grows like n * 1e-15; at 1e10 it is ~1e-5.
_MAX_N = 10**10

#: Above this epsilon, expm1(epsilon) overflows float64.
_EXPM1_MAX = 700.0


# --- parameters --------------------------------------------------------------------------------


def epsilon_min(beta: float) -> float:
    r"""Smallest :math:`\epsilon` that Theorem 3.9 of [LQS12]_ allows: :math:`-\ln(1-\beta)`.

    It comes from the suppressed case ``j = 0`` of the proof, whose ratio
    ``F(k-1; n, beta) / F(k-1; n-1, beta)`` lies in ``[1 - beta, 1]``.

    Parameters
    ----------
    beta : float
        Sampling probability, ``0 < beta < 1``.

    Examples
    --------
    >>> round(epsilon_min(0.2), 6)
    0.223144
    """
    beta = check_beta(beta)
    return -math.log1p(-beta)


def gamma(beta: float, epsilon: float) -> float:
    r"""The threshold fraction :math:`\gamma = (e^\epsilon - 1 + \beta)/e^\epsilon` of Thm 3.9.

    Theorem 3.9 of [LQS12]_ (Theorem 1 of [LQS11]_): an output with ``j`` copies of the target's
    cell (``n`` records in D) has ratio ``n(1-beta)/(n-j) > e^epsilon`` iff ``j > gamma n``.
    Always ``beta < gamma < 1`` for ``epsilon > 0``, since
    :math:`\gamma - \beta = (e^\epsilon - 1)(1-\beta)/e^\epsilon`.

    Parameters
    ----------
    beta : float
        Sampling probability, ``0 < beta < 1``.
    epsilon : float
        Finite, ``>= 0``.

    Notes
    -----
    Evaluated as ``-expm1(log1p(-beta) - epsilon)`` = :math:`1 - (1-\beta)e^{-\epsilon}`.

    Examples
    --------
    >>> round(gamma(0.1, 1.0), 6)
    0.668909
    """
    beta = check_beta(beta)
    epsilon = check_epsilon(epsilon)
    return -math.expm1(math.log1p(-beta) - epsilon)


def _check_epsilon_at_least_min(epsilon: float, beta: float, name: str = "epsilon") -> None:
    emin = -math.log1p(-beta)
    if epsilon < emin:
        raise InvalidParameter(
            f"{name} = {epsilon!r}: Theorem 3.9 of Li-Qardaji-Su needs {name} >= -ln(1 - beta)"
            f" = {emin!r} for beta = {beta!r} (the suppressed-cell ratio can be as low as "
            f"1 - beta); use {name} >= {emin:.6g} or a smaller beta"
        )


# --- d(k, beta, epsilon) -----------------------------------------------------------------------


def _log_binom_tail(
    n: NDArray[np.int64], j0: NDArray[np.int64], beta: float
) -> NDArray[np.float64]:
    """``ln P[Bin(n, beta) >= j0]`` row-wise, for ``k <= j0 <= n`` above ``gamma n``.

    Trusts its inputs (the caller guarantees the geometric decay of the terms).
    """
    j = j0[:, None] + np.arange(_TAIL_TERMS, dtype=np.int64)[None, :]
    nn = np.broadcast_to(n[:, None], j.shape)
    inside = j <= nn
    terms = np.full(j.shape, -np.inf)
    terms[inside] = binom.logpmf(j[inside], nn[inside], beta)
    tails: NDArray[np.float64] = logsumexp(terms, axis=1)
    return tails


def _odds_r(beta: float, epsilon: float) -> float:
    """``r = (1 - gamma) / gamma = (1 - beta) / (e^eps - 1 + beta)``.

    ``0.0`` once ``e^eps`` overflows, where ``n_J = J`` is also the exact answer (``J r < 1``
    for every ``J`` reached).
    """
    return (1.0 - beta) / (math.expm1(epsilon) + beta) if epsilon <= _EXPM1_MAX else 0.0


def _plateau_ends(thresholds: NDArray[np.int64], r: float) -> NDArray[np.float64]:
    """``n_J = J + floor(J r)``: the largest cell size whose bad outputs are ``j >= J``.

    As floats (exact integers below 2**53), so a huge ``r`` is compared with ``_MAX_N``
    before any cast to int64.
    """
    ends: NDArray[np.float64] = thresholds + np.floor(thresholds * (r * (1.0 + TIE_RTOL)))
    return ends


def _d_kernel(k: int, beta: float, epsilon: float) -> tuple[float, int]:
    """``(ln d(k, beta, epsilon), argmax n)`` for validated inputs; see :func:`log_delta_of`."""
    r = _odds_r(beta, epsilon)
    u = (1.0 - beta) * math.exp(-epsilon)  # 1 - gamma, without cancellation
    g = -math.expm1(math.log1p(-beta) - epsilon)  # gamma
    # Chernoff-Hoeffding rate KL(gamma || beta) > 0: P[Bin(n, beta) >= gamma n] <= e^{-n kl}.
    kl = float(rel_entr(g, beta) + rel_entr(u, 1.0 - beta))
    best, best_n = -math.inf, k
    start = k
    while True:
        thresholds = np.arange(start, start + _BLOCK, dtype=np.int64)
        n_float = _plateau_ends(thresholds, r)  # increasing in J
        ok = n_float <= _MAX_N
        if ok.any():
            n = n_float[ok].astype(np.int64)
            log_tail = _log_binom_tail(n, thresholds[ok], beta)
            i = int(np.argmax(log_tail))
            if log_tail[i] > best:
                best, best_n = float(log_tail[i]), int(n[i])
        if not ok.all():
            # every later J has a larger cell: done if the stopping rule already holds there
            n_beyond = float(n_float[~ok][0])
            if -kl * n_beyond <= best:
                return best, best_n
            raise InvalidParameter(
                f"beta = {beta!r}: with k = {k} and epsilon = {epsilon!r} the maximum over "
                f"cell sizes reaches n = {n_beyond:.3g} records (> {_MAX_N:.0e}), where "
                "scipy's binomial pmf loses accuracy; use a larger beta or a larger epsilon"
            )
        start += _BLOCK
        if -kl * float(_plateau_ends(np.array([start], dtype=np.int64), r)[0]) <= best:
            return best, best_n


def _validated(k: int, beta: float, epsilon: float) -> tuple[int, float, float]:
    k = check_k(k)
    beta = check_beta(beta)
    epsilon = check_epsilon(epsilon)
    _check_epsilon_at_least_min(epsilon, beta)
    return k, beta, epsilon


def log_delta_of(k: int, beta: float, epsilon: float) -> float:
    r"""Natural log of :math:`d(k,\beta,\epsilon)`, Theorem 3.9 of [LQS12]_ = Thm 1 of [LQS11]_.

    Finite even where :math:`d` underflows float64 (e.g. ``k = 5000``).

    Parameters
    ----------
    k : int
        Suppression threshold, ``>= 1``.
    beta : float
        Sampling probability, ``0 < beta < 1``.
    epsilon : float
        Finite, :math:`\epsilon \ge -\ln(1-\beta)`; smaller values raise
        :class:`~stream_release.errors.InvalidParameter` (the theorem does not hold there).

    Notes
    -----
    The maximum over the infinitely many ``n`` is computed exactly, not truncated at a guess.

    1. *Plateaus.* For a cell of ``n >= k`` records the bad outputs are
       :math:`j \ge J(n) = \max(k, \lfloor\gamma n\rfloor + 1)`, and
       :math:`\tau(n) = P[\mathrm{Bin}(n,\beta) \ge J(n)]`. :math:`J(n)` is non-decreasing
       and grows by at most 1 per step (:math:`\gamma < 1`); while it is constant,
       :math:`\tau` grows with ``n`` (the proof's own argument for :math:`n \le n_m`). So the
       maximum is at the last ``n`` of some plateau:
       :math:`n_J = \lceil J/\gamma \rceil - 1 = J - 1 + \lceil J r \rceil` with
       :math:`r = (1-\gamma)/\gamma = (1-\beta)/(e^\epsilon - 1 + \beta)`, and
       :math:`d = \max_{J \ge k} P[\mathrm{Bin}(n_J,\beta) \ge J]`. ``J = k`` is the paper's
       :math:`n_m = \lceil k/\gamma - 1\rceil`, ``J = k+i`` its "next local maximal points
       :math:`\lceil (k+i)/\gamma - 1\rceil`" ([LQS11]_ §4). The maximum is *not* always at
       :math:`n_m` (e.g. ``k=20, beta=0.3, epsilon=1`` peaks at ``n = 28``, not 26).
    2. *Stopping rule.* :math:`J > \gamma n_J`, so by the Chernoff-Hoeffding bound
       :math:`P[\mathrm{Bin}(n_J,\beta) \ge J] \le e^{-n_J\,\mathrm{KL}(\gamma\|\beta)}`, with
       :math:`\mathrm{KL}(\gamma\|\beta) > 0` because :math:`\gamma > \beta`. :math:`n_J`
       increases with ``J``, so once :math:`e^{-n_J \mathrm{KL}}` is at most the best value
       found, no larger ``J`` can beat it. Thresholds are scanned in vectorised blocks of
       512; about :math:`(\gamma/\mathrm{KL})\,|\ln d|` of them are needed, whatever
       ``beta`` (a few thousand for ``k = 5000``).
    3. *Each tail* is ``logsumexp`` of ``scipy.stats.binom.logpmf`` over its first 64 terms.
       Above the threshold, :math:`f(j+1)/f(j) < \rho = (1-\gamma)\beta/(\gamma(1-\beta))
       \le (1-\beta)/(2-\beta) < 1/2` when :math:`\epsilon \ge -\ln(1-\beta)`, so the omitted
       terms are below :math:`2^{-63}` of the sum. (``binom.logsf`` is ``log(sf)`` and
       underflows to ``-inf`` below 1e-308, e.g. at ``k = 5000``.)
    4. *Ties* ``j = gamma n`` have ratio exactly :math:`e^\epsilon`, which the theorem
       allows; a ``j`` within relative ``TIE_RTOL`` of :math:`\gamma n` is counted as bad,
       so rounding can only raise the result: it is never below the true ``d``.
    5. *Floor.* :math:`n_J = J + \lfloor J r\rfloor \ge J` also when :math:`e^\epsilon`
       overflows, so the result is :math:`\ge k\ln\beta`: :math:`d \ge \beta^k` (a cell of
       exactly ``k`` records, all sampled) and :math:`d \to \beta^k` as
       :math:`\epsilon \to \infty`.

    Accuracy: scipy's ``binom.logpmf`` has relative error about ``n * 1e-15``; worst-case
    cells above 1e10 records (``beta`` below about ``k * 1e-10``) are refused.

    Examples
    --------
    Table 2 of [LQS12]_ (k = 20, beta = 0.1, epsilon = 1.0): 4.07e-14.

    >>> round(math.exp(log_delta_of(20, 0.1, 1.0)) * 1e14, 3)
    4.073
    """
    k, beta, epsilon = _validated(k, beta, epsilon)
    return _d_kernel(k, beta, epsilon)[0]


def delta_of(k: int, beta: float, epsilon: float) -> float:
    r""":math:`\delta = d(k,\beta,\epsilon)` of Theorem 3.9 of [LQS12]_ (Theorem 1 of [LQS11]_).

    SDGS with parameters ``k`` and ``beta`` is :math:`(\epsilon, \delta)`-DP for every
    :math:`\epsilon \ge -\ln(1-\beta)`. See :func:`log_delta_of` for the parameters and for
    how the maximum over ``n`` is computed exactly.

    Returns ``exp(log_delta_of(...))``, which underflows to ``0.0`` below about 1e-308 (e.g.
    ``k = 5000``); report :func:`log_delta_of` there.

    Examples
    --------
    Table 2 of [LQS12]_, k = 20: beta = 0.2, epsilon = 0.25 gives 2.16e-03.

    >>> f"{delta_of(20, 0.2, 0.25):.3g}"
    '0.00216'

    The floor :math:`\beta^k`: a huge epsilon leaves only total disclosure.

    >>> math.isclose(delta_of(5, 0.05, 200.0), 0.05**5, rel_tol=1e-12)
    True
    """
    return math.exp(log_delta_of(k, beta, epsilon))


def worst_group_size(k: int, beta: float, epsilon: float) -> int:
    r"""The cell size ``n`` (records of D sharing the target's cell, counting it) attaining d.

    The argmax of Theorem 3.9 of [LQS12]_; for audit reports. Often, but not always,
    :math:`n_m = \lceil k/\gamma - 1\rceil`.

    Examples
    --------
    >>> worst_group_size(20, 0.1, 1.0), worst_group_size(20, 0.3, 1.0)
    (29, 28)
    """
    k, beta, epsilon = _validated(k, beta, epsilon)
    return _d_kernel(k, beta, epsilon)[1]


def delta_of_eps_safe(k: int, beta: float, epsilon: float, epsilon_1: float) -> float:
    r"""δ of an :math:`\epsilon_1`-safe k-anonymizer: :math:`d(k,\beta,\epsilon-\epsilon_1)`.

    Theorem 3.11 of [LQS12]_: if the generalization ``g`` is chosen by an
    :math:`\epsilon_1`-DP mechanism (Definition 3.10), sampling + applying ``g`` + k-suppression
    is :math:`(\epsilon, d(k,\beta,\epsilon-\epsilon_1))`-DP for
    :math:`\epsilon \ge \epsilon_1 - \ln(1-\beta)`.

    Parameters
    ----------
    k, beta : as in :func:`delta_of`
    epsilon : float
        Total privacy loss, :math:`\epsilon - \epsilon_1 \ge -\ln(1-\beta)`.
    epsilon_1 : float
        Privacy loss of choosing ``g``; finite, ``>= 0``.

    Notes
    -----
    The appendix proof (A.3) pulls the ratio ``r(g)`` out of a sum over ``g``, which is not
    rigorous as written. The same bound follows cleanly when ``g`` is chosen on the full data
    with coins independent of the sampling: Theorem 3.9 for each fixed ``g`` plus adaptive
    composition gives :math:`(\epsilon_1 + \epsilon_a, d(k,\beta,\epsilon_a))` with
    :math:`\epsilon_a = \epsilon - \epsilon_1` (digest, T6).

    Examples
    --------
    >>> delta_of_eps_safe(20, 0.1, 1.5, 0.5) == delta_of(20, 0.1, 1.0)
    True
    """
    k = check_k(k)
    beta = check_beta(beta)
    epsilon = check_epsilon(epsilon)
    epsilon_1 = check_epsilon(epsilon_1, "epsilon_1")
    rest = epsilon - epsilon_1
    _check_epsilon_at_least_min(rest, beta, "epsilon - epsilon_1")
    return math.exp(_d_kernel(k, beta, rest)[0])


def log_delta_chernoff(k: int, beta: float, epsilon: float) -> float:
    r"""Log of the closed-form bound of Theorem 6 of [LQS11]_ on :math:`d(k,\beta,\epsilon)`.

    .. math:: d(k,\beta,\epsilon) \le \exp\!\Big(-k\Big(\ln\frac{\gamma}{\beta}
              - \frac{\gamma-\beta}{\gamma}\Big)\Big)

    Parameters are those of :func:`delta_of` (:math:`\epsilon \ge -\ln(1-\beta)`).

    Notes
    -----
    The statement in [LQS11]_ prints ":math:`\gamma(1-\beta)/\gamma(1)`"; the proof gives
    :math:`(\gamma-\beta)/\gamma`, used here. The proof evaluates the Chernoff bound
    :math:`e^{-cn}`, :math:`c = \gamma\ln(\gamma/\beta) - (\gamma-\beta)`, at
    :math:`n = k/\gamma` only, via ":math:`\delta \approx \max_{n \ge k/\gamma}`". It is
    nonetheless a rigorous bound: for plateau ends :math:`n_J \ge (k+1)/\gamma - 1 \ge
    k/\gamma` (``J > k``) it is :math:`e^{-c n_J} \le e^{-ck/\gamma}`; for
    :math:`n_m < k/\gamma` the Chernoff bound at threshold ``k``, exponent
    :math:`k\ln(k/(\beta n)) - k + \beta n`, decreases in ``n`` for :math:`n < k/\beta` and so
    exceeds its value :math:`k(\ln(\gamma/\beta) - (\gamma-\beta)/\gamma)` at
    :math:`n = k/\gamma`.
    """
    k, beta, epsilon = _validated(k, beta, epsilon)
    g = -math.expm1(math.log1p(-beta) - epsilon)
    g_minus_beta = -(1.0 - beta) * math.expm1(-epsilon)  # (1 - beta)(1 - e^-eps), exact
    return -k * (math.log(g) - math.log(beta) - g_minus_beta / g)


def delta_chernoff(k: int, beta: float, epsilon: float) -> float:
    r"""Closed-form upper bound on :math:`d(k,\beta,\epsilon)`, Theorem 6 of [LQS11]_.

    ``exp(log_delta_chernoff(k, beta, epsilon))``; always ``>= delta_of(k, beta, epsilon)``
    and often orders of magnitude above it.

    Examples
    --------
    >>> f"{delta_chernoff(20, 0.2, 1.0):.4e}"
    '1.8728e-05'
    """
    return math.exp(log_delta_chernoff(k, beta, epsilon))

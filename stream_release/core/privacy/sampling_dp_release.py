r"""The two data steps of one sampled release ``SDGS(D; g, k, beta)`` ([LQS12]_, [LQS11]_).

:func:`sample_mask` draws a fresh Bernoulli sample :math:`\Lambda_\beta`;
:func:`safe_k_anonymize_mask` suppresses every generalized tuple occurring fewer than ``k``
times. Their privacy, :math:`(\epsilon, d(k,\beta,\epsilon))`-DP by Theorem 3.9 of [LQS12]_,
is computed in :mod:`stream_release.core.privacy.sampling_dp`.

[LQS12]_: N. Li, W. Qardaji, D. Su, On Sampling, Anonymization, and Differential Privacy,
ASIACCS 2012; [LQS11]_: its earlier version, Provably Private Data Anonymization
(arXiv:1101.2604v1); full references in :mod:`stream_release.core.privacy.sampling_dp`.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from stream_release.core.privacy.validation import check_beta, check_count, check_k
from stream_release.errors import InvalidParameter

__all__ = ["safe_k_anonymize_mask", "sample_mask"]


# --- the data steps of one release ---------------------------------------------------------------


def sample_mask(n: int, beta: float, rng: np.random.Generator) -> NDArray[np.bool_]:
    r"""One Bernoulli sample :math:`\Lambda_\beta`: keep each of ``n`` records w.p. ``beta``.

    The sampling step of SDGS (Algorithm 4 of [LQS11]_; Theorem 3.9 and Theorem 1 of
    [LQS12]_ assume independent coins, so the sample size is random). Draw a fresh mask for
    every release and discard the sample afterwards.

    Parameters
    ----------
    n : int
        Number of records, ``>= 0``.
    beta : float
        Keep probability, ``0 < beta <= 1``.
    rng : numpy.random.Generator
        Passed in (never the global state). In production seed it from OS entropy
        (``numpy.random.default_rng()``); the guarantee assumes the adversary cannot predict
        the coins.

    Returns
    -------
    (n,) bool
        ``True`` for the kept records: ``rng.random(n) < beta``.
    """
    n = check_count(n)
    beta = check_beta(beta, allow_one=True)
    if not isinstance(rng, np.random.Generator):
        raise TypeError(
            f"rng = {rng!r}: must be a numpy.random.Generator (e.g. numpy.random.default_rng());"
            " the global random state is not used"
        )
    return rng.random(n) < beta


def safe_k_anonymize_mask(generalized_codes: ArrayLike, k: int) -> NDArray[np.bool_]:
    r"""Keep-mask of k-suppression: drop every generalized tuple occurring fewer than k times.

    The ``Apply(g, T, k)`` step of [LQS12]_ §3.2 (Algorithm 3/4 of [LQS11]_) on already
    generalized rows. Privacy (Theorem 3.9 of [LQS12]_) needs the generalization to be fixed
    before seeing the data, every attribute treated as a QID, and ``T`` a fresh Bernoulli
    sample (:func:`sample_mask`).

    Parameters
    ----------
    generalized_codes : (n_records, n_attributes) int array
        Row ``i`` is the generalized tuple ``g(t_i)`` as integer codes.
    k : int
        Suppression threshold, ``>= 1``.

    Returns
    -------
    (n_records,) bool
        ``True`` where the row's generalized tuple occurs ``>= k`` times in the input.

    Examples
    --------
    >>> safe_k_anonymize_mask([[1, 2], [1, 2], [3, 4], [1, 2]], 2).tolist()
    [True, True, False, True]
    """
    k = check_k(k)
    codes = np.asarray(generalized_codes)
    if codes.ndim != 2:
        raise InvalidParameter(
            f"generalized_codes has shape {codes.shape}: must be a 2-D "
            "(n_records, n_attributes) integer array"
        )
    if codes.size and not np.issubdtype(codes.dtype, np.integer):
        raise InvalidParameter(
            f"generalized_codes has dtype {codes.dtype}: must hold integer codes "
            "(encode values to ints once, at ingestion)"
        )
    n_records, n_attributes = codes.shape
    if n_records == 0:
        return np.zeros(0, dtype=np.bool_)
    if n_attributes == 0:  # every row is the empty tuple: one cell of n_records
        return np.full(n_records, n_records >= k, dtype=np.bool_)
    _, inverse, counts = np.unique(codes, axis=0, return_inverse=True, return_counts=True)
    return counts[inverse.reshape(-1)] >= k

r"""The Laplace mechanism on an interval without floating-point leaks: a clamped discrete
Laplace on a grid, sampled from 64-bit words by an integer table.

A textbook floating-point Laplace sampler (``x + b ln(u)``) publishes a double whose low-order
bits depend on ``x``: the set of doubles it can return differs between neighbouring inputs,
and one output can rule an input out (Mironov, *On Significance of the Least Significant Bits
for Differential Privacy*, CCS 2012). Here nothing of the kind can happen:

* the interval ``[lo, hi]`` becomes the grid ``lo + j r``, ``j = 0..s`` with
  ``r = (hi - lo) / s``; an input is clipped into the interval and rounded to its grid point
  ``j`` (a function of the input alone, before any noise);
* the noise is the two-sided geometric (discrete Laplace) ``P(K = k) = (1-q)/(1+q) q^{|k|}``,
  and the output ``clamp(j + K, 0, s)``: only the tails ``|K| >= s`` matter beyond the grid,
  so ``K`` is drawn from the finite law of ``clamp(K, -s, s)``;
* that law is a table of ``2s`` thresholds on the 64-bit integers, computed in 60-digit
  decimal arithmetic from the exact rational value of ``q``; one uniform 64-bit word picks a
  cell (``searchsorted``), so every output is a grid point and every probability is a
  multiple of ``2^-64`` known exactly.

Privacy (pure epsilon). For the exact law, ``P(y | j) / P(y | j') <= q^{-|j - j'|} <=
q^{-s}``, the clamped cells included (they sum the same geometric tails), so ``q =
e^{-epsilon/s}`` gives epsilon-DP between any two values of the interval (Example 5 of
[HLM14] with ``delta = 0``, on a grid). The table's rounding moves each cell by less than
``2^-64``; :attr:`GridLaplace.epsilon_realized` is the largest log-ratio of the *table's*
probabilities, computed from its integers, and :func:`grid_laplace` moves ``q`` up (more
noise) until it is at most the epsilon asked for.

References
----------
.. [HLM14] N. Holohan, D. J. Leith, O. Mason. Differential Privacy in Metric Spaces:
   Numerical, Categorical and Functional Data Under the One Roof. arXiv:1402.6124 (2014).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from decimal import Decimal, localcontext
from fractions import Fraction

import numpy as np
from numpy.typing import NDArray

from stream_release.errors import InvalidParameter

__all__ = ["MAX_STEPS", "GridLaplace", "default_steps", "grid_laplace"]

MAX_STEPS = 1024
"""Most grid steps across an interval (the privacy check is quadratic in them)."""

_WORD = 1 << 64
_DIGITS = 60


@dataclass(frozen=True, eq=False)
class GridLaplace:
    """A clamped discrete Laplace on the grid ``lo + j r``, ``j = 0..steps``.

    ``thresholds`` (2 steps,) uint64: a word ``w`` gives the noise
    ``K = searchsorted(thresholds, w, "right") - steps``. ``q``: the geometric ratio;
    ``epsilon_realized``: the table's own privacy (<= the epsilon it was made for).
    """

    lo: float
    hi: float
    steps: int
    q: float
    thresholds: NDArray[np.uint64]
    epsilon_realized: float

    @property
    def resolution(self) -> float:
        """The grid step ``r = (hi - lo) / steps`` (0 for a single point)."""
        return (self.hi - self.lo) / self.steps if self.steps else 0.0

    @property
    def scale(self) -> float:
        """The noise scale in the attribute's units: ``r / ln(1/q)`` (the Laplace ``b`` whose
        density falls like ``q`` per grid step)."""
        return self.resolution / -math.log(self.q)

    def cells(self) -> NDArray[np.int64]:
        """(2 steps + 1,) the table's mass of each noise ``K = -steps..steps``, in units of
        ``2^-64`` (summing to ``2^64``; Python-int exact, held as int64 where it fits)."""
        edges = [0, *self.thresholds.tolist(), _WORD]
        return np.array([b - a for a, b in itertools.pairwise(edges)], dtype=object)

    def sample(self, x: NDArray[np.float64], words: NDArray[np.uint64]) -> NDArray[np.float64]:
        """Sanitised values: each ``x`` clipped into ``[lo, hi]``, rounded to the grid and moved
        by the noise its word picks, clamped into the grid."""
        j = self.grid_index(x)
        if self.steps == 0:
            return self.value(j)
        k = np.searchsorted(self.thresholds, words, side="right").astype(np.int64) - self.steps
        return self.value(np.clip(j + k, 0, self.steps))

    def grid_index(self, x: NDArray[np.float64]) -> NDArray[np.int64]:
        """The grid point of each value (clipped into the interval first)."""
        clipped = np.clip(np.asarray(x, dtype=np.float64), self.lo, self.hi)
        if self.steps == 0:
            return np.zeros(clipped.shape, dtype=np.int64)
        return np.rint((clipped - self.lo) / self.resolution).astype(np.int64)

    def value(self, j: NDArray[np.int64]) -> NDArray[np.float64]:
        """The published value of grid point ``j`` (exactly ``hi`` at the last one)."""
        out = self.lo + np.asarray(j, dtype=np.float64) * self.resolution
        return np.where(np.asarray(j) >= self.steps, self.hi, out)

    def output_law(self) -> NDArray[np.float64]:
        """(steps + 1, steps + 1) ``P(y | j)`` of the table, row ``j``, column ``y``."""
        s = self.steps
        cells = np.array([float(c) for c in self.cells()]) / float(_WORD)
        law = np.zeros((s + 1, s + 1))
        for j in range(s + 1):
            ks = np.arange(-s, s + 1)
            y = np.clip(j + ks, 0, s)
            np.add.at(law[j], y, cells)
        return law

    def expected_error(self) -> float:
        """The largest expected ``|output - input|`` over the grid's inputs, in the
        attribute's units (the worst case of the interval, as Theorem 6 of [HLM14] bounds)."""
        s = self.steps
        law = self.output_law()
        distance = np.abs(np.arange(s + 1)[None, :] - np.arange(s + 1)[:, None])
        return float((law * distance).sum(axis=1).max()) * self.resolution


def default_steps(lo: float, hi: float) -> int:
    """Grid steps when no resolution is configured: one per unit for an integer interval of
    16 to :data:`MAX_STEPS` units (ages, counts), else 256."""
    width = hi - lo
    if float(lo).is_integer() and float(width).is_integer() and 16 <= width <= MAX_STEPS:
        return int(width)
    return 256


def grid_laplace(
    lo: float, hi: float, epsilon: float, *, resolution: float | None = None
) -> GridLaplace:
    """The clamped discrete Laplace of an interval that is epsilon-DP between any two of its
    values (module docstring), on the grid of ``resolution`` (default :func:`default_steps`).

    Raises
    ------
    InvalidParameter
        ``hi < lo``, ``epsilon <= 0`` for a proper interval, or a resolution giving more than
        :data:`MAX_STEPS` steps.
    """
    if not (math.isfinite(lo) and math.isfinite(hi) and lo <= hi):
        raise InvalidParameter(f"bounds [{lo!r}, {hi!r}]: need finite lo <= hi")
    if hi == lo:
        return GridLaplace(lo, hi, 0, 0.0, np.zeros(0, dtype=np.uint64), 0.0)
    if not (epsilon > 0 and math.isfinite(epsilon)):
        raise InvalidParameter(f"epsilon = {epsilon!r}: must be a finite number > 0")
    if resolution is None:
        steps = default_steps(lo, hi)
    else:
        if not (resolution > 0 and math.isfinite(resolution)):
            raise InvalidParameter(f"resolution = {resolution!r}: must be a finite number > 0")
        steps = max(1, math.ceil((hi - lo) / resolution - 1e-9))
    if steps > MAX_STEPS:
        raise InvalidParameter(
            f"resolution = {resolution!r} makes {steps} grid steps across [{lo!r}, {hi!r}]; "
            f"at most {MAX_STEPS}: choose a resolution of at least {(hi - lo) / MAX_STEPS:.6g}"
        )
    # a hair towards more noise, so that the table's rounding stays within epsilon
    # q towards 1 (more noise) until the table's own probabilities meet epsilon: a large
    # epsilon leaves the outer cells ~q^s of a 2^64 word, where rounding to whole words
    # matters, so the step grows geometrically (e.g. [17, 90] at epsilon 45: 12 tries)
    q = math.nextafter(math.exp(-epsilon * (1.0 - 1e-9) / steps), 1.0)
    step = 1e-6
    for _ in range(64):
        thresholds = _thresholds(q, steps)
        table = GridLaplace(lo, hi, steps, q, thresholds, 0.0)
        realized = _epsilon_realized(table)
        if realized <= epsilon:
            return GridLaplace(lo, hi, steps, q, thresholds, realized)
        q = min(math.nextafter(1.0, 0.0), q + (1.0 - q) * step + 2.0**-52)
        step = min(0.5, step * 2.0)
    raise InvalidParameter(
        f"no discrete Laplace table meets epsilon = {epsilon!r} on {steps} grid steps: the "
        "outer cells round to nothing; lower epsilon or use a coarser resolution"
    )


def _thresholds(q: float, steps: int) -> NDArray[np.uint64]:
    """The 2 steps cumulative boundaries of ``clamp(K, -s, s)`` on the 2^64 scale."""
    with localcontext() as ctx:
        ctx.prec = _DIGITS
        qd = Decimal(Fraction(q).numerator) / Decimal(Fraction(q).denominator)
        one = Decimal(1)
        norm = (one - qd) / (one + qd)
        tail = qd**steps / (one + qd)
        masses = [tail] + [norm * qd ** abs(k) for k in range(-steps + 1, steps)] + [tail]
        edges, total = [], Decimal(0)
        for mass in masses[:-1]:
            total += mass
            edges.append(min(_WORD - 1, max(0, int((total * _WORD).to_integral_value()))))
    return np.array(edges, dtype=np.uint64)


def _epsilon_realized(table: GridLaplace) -> float:
    """``max_y ln(max_j P(y|j) / min_j P(y|j))`` of the table's own probabilities."""
    law = table.output_law()
    low = law.min(axis=0)
    if np.any(low <= 0.0):
        return math.inf
    # the floats of the table's integers are within 2^-52 of them: 1e-12 covers their logs
    return float(np.log(law.max(axis=0) / low).max()) + 1e-12

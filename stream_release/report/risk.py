"""Re-identification risks of one published release, as ARX and pycanon define them.

The equivalence classes are the published groups: every member of a group shares its
generalized QIDs, and the suppressed rows are published as one more group whose QIDs are all
``*`` (a class of their count). A record's *prosecutor* risk is ``1 / |class|``: an adversary
who knows the person is in the release and knows their QIDs picks one of the class's records
(El Emam and Dankar, "Protecting privacy using k-anonymity", JAMIA 15(5), 2008; ARX's
``RiskModelSampleSummary``: F. Prasser, J. Eicher, H. Spengler, R. Bild, K. A. Kuhn, "Flexible
data anonymization using ARX -- Current status and challenges ahead", Software: Practice and
Experience 50(7), 2020). ARX reports, per attacker model:

* the **highest** risk, ``1 / min |class|`` (pycanon's ``k_anonymity`` is that ``min |class|``:
  J. Sáinz-Pardo Díaz, Á. López García, "A Python library to check the level of anonymity of
  a dataset", Scientific Data 9, 2022);
* the **average** risk (ARX's success rate), ``#classes / #records``: the expected share of
  records an adversary re-identifies who tries every record;
* the **records at risk**: the share of records whose risk is above a threshold.

The *journalist* attacker does not know whether the person is in the release; without a
population table its classes are the release's own and its risks equal the prosecutor's (ARX
with the sample as the population). The *marketer* attacker re-identifies as many records as
possible, with success rate ``#classes / #records``.

These are one release's risks. The global guarantee is about the sensitive value across
releases (``breach.max``), which a class's size alone does not bound.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

__all__ = ["DEFAULT_THRESHOLD", "ReleaseRisks", "release_risks"]

DEFAULT_THRESHOLD = 0.2
"""A record whose prosecutor risk is above this is *at risk* (El Emam's usual threshold for a
release to a known recipient)."""


@dataclass(frozen=True)
class ReleaseRisks:
    """The risks of one release (module docstring); all 0 for a release of no record."""

    records: int
    classes: int
    smallest_class: int
    prosecutor_highest: float
    prosecutor_average: float
    records_at_risk: float
    threshold: float

    @property
    def journalist_highest(self) -> float:
        """Without a population table: the prosecutor's (module docstring)."""
        return self.prosecutor_highest

    @property
    def journalist_average(self) -> float:
        """Without a population table: the prosecutor's."""
        return self.prosecutor_average

    @property
    def marketer(self) -> float:
        """ARX's marketer risk: the success rate ``#classes / #records``, the average."""
        return self.prosecutor_average


def release_risks(
    sizes: NDArray[np.int64] | list[int], suppressed: int = 0, threshold: float = DEFAULT_THRESHOLD
) -> ReleaseRisks:
    """The risks of a release whose groups have ``sizes`` and whose ``suppressed`` rows are
    published as one more group.

    >>> r = release_risks([2, 3, 5], suppressed=0)
    >>> r.prosecutor_highest, round(r.prosecutor_average, 4), r.records_at_risk
    (0.5, 0.3, 0.5)
    """
    classes = [int(s) for s in np.asarray(sizes, dtype=np.int64).tolist() if s > 0]
    if suppressed > 0:
        classes.append(int(suppressed))
    records = sum(classes)
    if not records:
        return ReleaseRisks(0, 0, 0, 0.0, 0.0, 0.0, threshold)
    smallest = min(classes)
    highest = 1.0 / smallest
    average = len(classes) / records
    at_risk = sum(size for size in classes if 1.0 / size > threshold) / records
    return ReleaseRisks(
        records=records,
        classes=len(classes),
        smallest_class=smallest,
        prosecutor_highest=highest,
        prosecutor_average=average,
        records_at_risk=at_risk,
        threshold=threshold,
    )

"""The re-identification risks of a release, against a hand computation on a small table.

Eight records in three published groups of sizes 2, 2 and 4, and 3 suppressed rows (one more
class, every QID ``*``): 11 records in 4 classes. By hand: each record's prosecutor risk is
1/|class|: 1/2 for the 4 records of the groups of 2, 1/4 for the 4 of the group of 4, 1/3 for
the 3 suppressed ones. The highest is 1/2; ARX's average (success rate) is 4 classes / 11
records = 0.3636 (the mean of the per-record risks: (4 * 1/2 + 4 * 1/4 + 3 * 1/3) / 11 =
4/11); at the threshold 0.2 every record is at risk (1/4 > 0.2), at 0.3 the 7 records of the
classes of 2 and 3 (7/11); pycanon's k is 2.
"""

from __future__ import annotations

import pytest

from stream_release.report.risk import release_risks


def test_the_risks_of_a_small_release_are_the_hand_computed_ones() -> None:
    risks = release_risks([2, 2, 4], suppressed=3, threshold=0.2)
    assert (risks.records, risks.classes, risks.smallest_class) == (11, 4, 2)
    assert risks.prosecutor_highest == 0.5
    assert risks.prosecutor_average == pytest.approx(4 / 11)
    per_record = [1 / 2] * 4 + [1 / 4] * 4 + [1 / 3] * 3
    assert risks.prosecutor_average == pytest.approx(sum(per_record) / len(per_record))
    assert risks.records_at_risk == 1.0
    assert release_risks([2, 2, 4], suppressed=3, threshold=0.3).records_at_risk == pytest.approx(
        7 / 11
    )
    # without a population table the journalist's classes are the release's; the marketer's
    # success rate is the average
    assert (risks.journalist_highest, risks.journalist_average) == (0.5, pytest.approx(4 / 11))
    assert risks.marketer == pytest.approx(4 / 11)


def test_a_release_of_one_class_and_of_none() -> None:
    assert release_risks([5]).prosecutor_highest == 0.2
    assert release_risks([5]).records_at_risk == 0.0  # 1/5 is not above 0.2
    empty = release_risks([], suppressed=0)
    assert (empty.records, empty.prosecutor_highest, empty.marketer) == (0, 0.0, 0.0)

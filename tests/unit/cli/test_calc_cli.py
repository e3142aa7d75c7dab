"""``stream-release calc NAME ...`` (docs/contract.md §3): each calculator prints its paper's
numbers."""

from __future__ import annotations

import json
import math
import re
from decimal import Decimal

import pytest

from stream_release.cli.calc import CALCULATORS
from stream_release.cli.main import main

LN11 = "2.397895272798371"  # ln 11: at beta = 0.1, epsilon' = ln(1 + 0.1 (11 - 1)) = ln 2

# (argv, field, the paper's number as printed there, a word of the header)
ORACLES = [
    (["delta", "--k", "20", "--beta", "0.1", "--epsilon", "1.0"], "delta", "4.07e-14",
     "Theorem 3.9"),
    (["amplify", "--epsilon", LN11, "--delta", "0", "--beta", "0.1"], "epsilon_amplified",
     "0.693147", "Theorem 1"),
    (["rp-cap", "--p", "0.5", "--epsilon", "0.5", "--delta", "0.3", "--domain-size", "14",
      "--f", "1"], "cap_theorem_5_13", "20.6395", "5.13"),
    (["laplace-scale", "--diameter", "1", "--epsilon", "1", "--delta", "0.01"], "scale_paper",
     "0.9900", "Example 5"),
    (["laplace-scale", "--diameter", "1", "--epsilon", "1", "--delta", "0.01"], "scale_tight",
     "0.9803", "Example 5"),
    (["rr-keep", "--domain-size", "8", "--epsilon", "1", "--delta", "0"], "p_other", "0.10290",
     "Examples 6 and 7"),
    (["lower-bound", "--epsilon", "1", "--delta", "0", "--domain-size", "8"], "lower_bound",
     "0.72029", "Theorems 6 and 7"),
]  # fmt: skip


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["calc", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def _fields(text: str) -> tuple[str, dict[str, str]]:
    header, *lines = text.splitlines()
    return header, dict(re.split(r"\s{2,}", line, maxsplit=1) for line in lines)


def _agrees(value: float, paper: str) -> bool:
    """``value`` equals the paper's number up to half a unit in its last printed digit.

    A little more (5e-6 relative) is allowed for the 6 significant digits of the text output.
    """
    half_unit = 0.5 * 10.0 ** Decimal(paper).as_tuple().exponent
    return abs(value - float(paper)) <= half_unit + 5e-6 * abs(value)


@pytest.mark.parametrize(("argv", "field", "paper", "cite"), ORACLES)
def test_text_prints_the_papers_number(
    capsys: pytest.CaptureFixture[str], argv: list[str], field: str, paper: str, cite: str
) -> None:
    code, out, err = _run(capsys, *argv)
    assert (code, err) == (0, "")
    header, fields = _fields(out)
    assert cite in header
    assert _agrees(float(fields[field]), paper), (field, fields[field], paper)


@pytest.mark.parametrize(("argv", "field", "paper", "cite"), ORACLES)
def test_json_parses_and_holds_the_papers_number(
    capsys: pytest.CaptureFixture[str], argv: list[str], field: str, paper: str, cite: str
) -> None:
    code, out, err = _run(capsys, *argv, "--json")
    assert (code, err) == (0, "")
    report = json.loads(out)
    assert _agrees(report[field], paper), (field, report[field], paper)


def test_json_carries_full_precision(capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = _run(
        capsys, "amplify", "--epsilon", LN11, "--delta", "0", "--beta", "0.1", "--json"
    )
    report = json.loads(out)
    assert report["epsilon_amplified"] == pytest.approx(math.log(2), abs=1e-12)
    assert report["delta_amplified"] == 0.0
    _, out, _ = _run(capsys, "delta", "--k", "20", "--beta", "0.1", "--epsilon", "1.0", "--json")
    report = json.loads(out)
    assert (report["argmax_n"], report["dps"]) == (29, True)
    assert f"{report['delta']:.3g}" == "4.07e-14"


def test_text_lines_are_aligned_and_complete(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["lower-bound", "--epsilon", "1", "--delta", "0", "--domain-size", "8"]
    _, text, _ = _run(capsys, *argv)
    _, as_json, _ = _run(capsys, *argv, "--json")
    _, fields = _fields(text)
    assert list(fields) == list(json.loads(as_json))
    columns = {len(line) - len(line.split(None, 1)[1]) for line in text.splitlines()[1:]}
    assert len(columns) == 1
    assert fields["mechanism"] == "randomised_response"
    assert (fields["outputs_in_domain"], fields["note"]) == ("true", "-")  # bool; empty note


def test_rp_cap_f_defaults_to_one(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["rp-cap", "--p", "0.5", "--epsilon", "0.5", "--delta", "0.3", "--domain-size", "14"]
    _, out, _ = _run(capsys, *argv, "--json")
    report = json.loads(out)
    assert report["f"] == 1.0
    assert _agrees(report["cap_theorem_5_13"], "20.6395")
    assert _agrees(report["cap_theorem_5_11"], "17.1025")
    assert report["max_trials_theorem_5_13"] == 20


def test_lower_bound_of_an_interval(capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = _run(capsys, "lower-bound", "--epsilon", "1", "--delta", "0.01", "--diameter", "1")
    header, fields = _fields(out)
    assert "Holohan-Leith-Mason" in header
    assert (fields["mechanism"], fields["domain_size"], fields["theorem_7"]) == (
        "laplace",
        "-",
        "-",
    )


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["delta", "--k", "20", "--beta", "1.5", "--epsilon", "1.0"], "beta = 1.5"),
        (["delta", "--k", "20", "--beta", "0.5", "--epsilon", "0.1"], "-ln(1 - beta)"),
        (["delta", "--k", "0", "--beta", "0.1", "--epsilon", "1.0"], "k = 0"),
        (["amplify", "--epsilon", "-1", "--delta", "0", "--beta", "0.1"], "epsilon = -1.0"),
        (
            ["rp-cap", "--p", "0.5", "--epsilon", "2", "--delta", "0.3", "--domain-size", "14"],
            "epsilon = 2.0",
        ),
        (
            ["rp-cap", "--p", "0.5", "--epsilon", "0.5", "--delta", "0.3", "--domain-size", "1"],
            "domain_size = 1",
        ),
        (["laplace-scale", "--diameter", "-1", "--epsilon", "1", "--delta", "0"], "diameter = -1"),
        (["rr-keep", "--domain-size", "8", "--epsilon", "1", "--delta", "1"], "delta = 1.0"),
        (["lower-bound", "--epsilon", "1", "--delta", "0"], "domain_size = None"),
        (
            ["lower-bound", "--epsilon", "1", "--delta", "0", "--diameter", "1", "--kappa", "2"],
            "kappa = 2.0",
        ),
    ],
)
def test_bad_parameter_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], argv: list[str], named: str
) -> None:
    code, out, err = _run(capsys, *argv)
    assert (code, out) == (2, "")
    assert err.count("\n") == 1
    assert err.startswith(f"stream-release calc {argv[0]}: error: ")
    assert named in err


def test_help_lists_the_calculators(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        main(["calc", "--help"])
    assert stop.value.code == 0
    out = capsys.readouterr().out
    names = [c.name for c in CALCULATORS]
    assert names == ["delta", "amplify", "rp-cap", "laplace-scale", "rr-keep", "lower-bound"]
    assert all(re.search(rf"^\s+{name}\b", out, re.M) for name in names)


def test_calc_needs_a_name(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        main(["calc"])
    assert stop.value.code == 2
    assert "NAME" in capsys.readouterr().err

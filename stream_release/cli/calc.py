"""``stream-release calc NAME ...``: the companion papers' parameter calculators (docs/contract.md
§3).

Thin, like :mod:`stream_release.cli.main`: each calculator parses its flags, calls one ``calc_*``
function of :mod:`stream_release.core.privacy` (where the math, the validation and the paper
citations live) and prints the returned dict, either as aligned ``name  value`` lines under a
header naming the paper and theorem, or with ``--json`` as one JSON object. A bad parameter
raises :class:`~stream_release.errors.InvalidParameter`, which ``cli.main`` prints as one line
(exit 2).
"""

from __future__ import annotations

import argparse
import importlib
import json
from collections.abc import Callable
from typing import Any, NamedTuple

_LQS = "Li-Qardaji-Su, ASIACCS 2012, arXiv:1101.2604"
_WHF = "Wang-Han-Fu, arXiv:1202.3179"
_HLM = "Holohan-Leith-Mason, arXiv:1402.6124"


class _Flag(NamedTuple):
    name: str  # the keyword of the calc_* function; the flag is --name with "_" -> "-"
    type: Callable[[str], Any]
    help: str
    required: bool = True
    default: Any = None


class _Calculator(NamedTuple):
    name: str
    help: str
    header: str
    function: str  # "module:function" under stream_release.core.privacy, imported when run
    flags: tuple[_Flag, ...]


_EPSILON = _Flag("epsilon", float, "privacy parameter epsilon >= 0")
_DELTA = _Flag("delta", float, "privacy parameter delta, 0 <= delta < 1")

CALCULATORS: tuple[_Calculator, ...] = (
    _Calculator(
        "delta",
        "delta of Bernoulli sampling + safe k-anonymization",
        f"delta of sampling + safe k-anonymization: Theorem 3.9 of {_LQS} "
        "(Chernoff bound: Theorem 6 of the 2011 version)",
        "sampling_dp_calculators:calc_delta",
        (
            _Flag("k", int, "suppression threshold k >= 1"),
            _Flag("beta", float, "sampling probability, 0 < beta < 1"),
            _Flag("epsilon", float, "epsilon >= -ln(1 - beta)"),
        ),
    ),
    _Calculator(
        "amplify",
        "(epsilon, delta) of an (epsilon, delta)-DP mechanism run on a beta-sample",
        f"amplification by sampling: Theorem 1 of {_LQS}",
        "sampling_dp_calculators:calc_amplify",
        (
            _EPSILON,
            _Flag("delta", float, "privacy parameter delta, 0 <= delta <= 1"),
            _Flag("beta", float, "sampling probability, 0 < beta <= 1"),
        ),
    ),
    _Calculator(
        "rp-cap",
        "reconstruction-privacy cap s_g on the trials of one group",
        f"reconstruction-privacy group cap s_g: Theorem 5.13 (Eq. 10) and Theorem 5.11 "
        f"(Eq. 9) of {_WHF}",
        "reconstruction:calc_rp_cap",
        (
            _Flag("p", float, "retention probability, 0 < p < 1"),
            _Flag("epsilon", float, "relative reconstruction error, 0 < epsilon <= epsilon_max"),
            _Flag("delta", float, "tail probability to keep, 0 < delta < 1"),
            _Flag("domain_size", int, "number of sensitive values m >= 2"),
            _Flag("f", float, "the group's largest value frequency, 0 < f <= 1", False, 1.0),
        ),
    ),
    _Calculator(
        "laplace-scale",
        "Laplace scale for a numeric attribute on [lo, hi]",
        f"Laplace on [lo, hi]: Example 5 of {_HLM} (lower bound: Theorem 6)",
        "dp_calculators:calc_laplace_scale",
        (
            _Flag("diameter", float, "hi - lo, >= 0"),
            _Flag("epsilon", float, "privacy parameter epsilon >= 0, > 0 unless delta > 0"),
            _DELTA,
        ),
    ),
    _Calculator(
        "rr-keep",
        "k-ary randomised response: keep probability and smallest other probability",
        f"k-ary randomised response: Examples 6 and 7 of {_HLM} (lower bound: Theorem 7)",
        "dp_calculators:calc_rr_keep",
        (_Flag("domain_size", int, "number of categories, >= 1"), _EPSILON, _DELTA),
    ),
    _Calculator(
        "lower-bound",
        "smallest per-record error any (epsilon, delta) mechanism can reach",
        f"per-record error lower bound: Theorems 6 and 7 of {_HLM}",
        "dp_calculators:calc_lower_bound",
        (
            _EPSILON,
            _DELTA,
            _Flag(
                "diameter",
                float,
                "numeric interval: hi - lo; finite domain: the largest distance (default kappa)",
                False,
            ),
            _Flag("domain_size", int, "finite domain: the number of categories", False),
            _Flag(
                "kappa",
                float,
                "finite domain: the smallest distance between two categories (default 1)",
                False,
            ),
        ),
    ),
)


def add_calc_parser(sub: Any) -> None:
    """Add ``calc`` and one sub-command per calculator to the ``stream-release`` sub-parsers."""
    calc = sub.add_parser(
        "calc",
        help="parameter calculators of the companion papers",
        description="Parameter calculators of the companion papers; each takes --json.",
    )
    names = calc.add_subparsers(
        dest="calculator", required=True, metavar="NAME", help="the calculator to run"
    )
    for calculator in CALCULATORS:
        parser = names.add_parser(
            calculator.name, help=calculator.help, description=calculator.header
        )
        for flag in calculator.flags:
            parser.add_argument(
                "--" + flag.name.replace("_", "-"),
                type=flag.type,
                required=flag.required,
                default=flag.default,
                help=flag.help if flag.default is None else f"{flag.help} (default {flag.default})",
            )
        parser.add_argument("--json", action="store_true", help="machine-readable output")
        # errors then read "stream-release calc NAME: error: ..." (cli.main prints args.command)
        parser.set_defaults(run=_run, calc=calculator, command=f"calc {calculator.name}")


def _run(args: argparse.Namespace) -> int:
    calculator: _Calculator = args.calc
    module, function = calculator.function.split(":")
    compute = getattr(importlib.import_module(f"stream_release.core.privacy.{module}"), function)
    report = compute(**{flag.name: getattr(args, flag.name) for flag in calculator.flags})
    print(json.dumps(report) if args.json else _text(calculator.header, report))
    return 0


def _text(header: str, report: dict[str, Any]) -> str:
    width = max(map(len, report)) + 2
    return "\n".join([header, *(f"{k:<{width}}{_value(v)}" for k, v in report.items())])


def _value(value: Any) -> str:
    if value is None or value == "":
        return "-"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)

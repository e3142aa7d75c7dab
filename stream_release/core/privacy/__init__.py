"""Pure privacy mathematics: no I/O, no clock, no global random state.

The package imports none of its modules itself: the audit reads a few of them (the
mechanisms' arithmetic) and must load nothing of the planning (the strategies). The names
below are loaded from their module on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from stream_release.core.privacy.breach import (
        BREACH_ATOL,
        RATIO_RTOL,
        bound_limit,
        breach_from_log_product,
        breach_probability,
        breach_probability_exact,
        breach_upper_bound,
        constant_ratio_target,
        exact_bound,
        exceeds_bound,
        geometric_ratio,
        log_survival_factor,
        minimum_ratio,
        minimum_ratio_from_log_product,
        possibly_exceeds,
    )
    from stream_release.core.privacy.strategy import MINIMAL_MARGIN, Strategy, make_strategy

_MODULE_OF = {
    **dict.fromkeys(("MINIMAL_MARGIN", "Strategy", "make_strategy"), "strategy"),
    **dict.fromkeys(
        (
            "BREACH_ATOL",
            "RATIO_RTOL",
            "bound_limit",
            "breach_from_log_product",
            "breach_probability",
            "breach_probability_exact",
            "breach_upper_bound",
            "constant_ratio_target",
            "exact_bound",
            "exceeds_bound",
            "geometric_ratio",
            "log_survival_factor",
            "minimum_ratio",
            "minimum_ratio_from_log_product",
            "possibly_exceeds",
        ),
        "breach",
    ),
}

__all__ = [
    "BREACH_ATOL",
    "MINIMAL_MARGIN",
    "RATIO_RTOL",
    "Strategy",
    "bound_limit",
    "breach_from_log_product",
    "breach_probability",
    "breach_probability_exact",
    "breach_upper_bound",
    "constant_ratio_target",
    "exact_bound",
    "exceeds_bound",
    "geometric_ratio",
    "log_survival_factor",
    "make_strategy",
    "minimum_ratio",
    "minimum_ratio_from_log_product",
    "possibly_exceeds",
]


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)

"""Pure privacy mathematics: no I/O, no clock, no global random state."""

from stream_release.privacy.breach import (
    BREACH_ATOL,
    RATIO_RTOL,
    breach_from_log_product,
    breach_probability,
    constant_ratio_target,
    exceeds_bound,
    geometric_ratio,
    log_survival_factor,
    minimum_ratio,
    minimum_ratio_from_log_product,
)
from stream_release.privacy.strategy import (
    MINIMAL_MARGIN,
    Strategy,
    make_strategy,
)

__all__ = [
    "BREACH_ATOL",
    "MINIMAL_MARGIN",
    "RATIO_RTOL",
    "Strategy",
    "breach_from_log_product",
    "breach_probability",
    "constant_ratio_target",
    "exceeds_bound",
    "geometric_ratio",
    "log_survival_factor",
    "make_strategy",
    "minimum_ratio",
    "minimum_ratio_from_log_product",
]

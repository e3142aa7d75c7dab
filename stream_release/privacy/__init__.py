"""Pure privacy mathematics: no I/O, no clock, no global random state."""

from stream_release.privacy.breach import (
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

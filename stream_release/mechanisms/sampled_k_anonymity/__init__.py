"""``kind = "sampled-k-anonymity"``: sampling and safe k-anonymization as (ε, δ)-DP (Li, Qardaji
and Su, arXiv:1101.2604): its section model (:mod:`.settings`), the mechanism (:mod:`.mechanism`)
and the independent verification of its releases (:mod:`.audit`)."""

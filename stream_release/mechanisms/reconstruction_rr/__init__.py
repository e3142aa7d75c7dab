"""``kind = "reconstruction-private-rr"``: randomized response with reconstruction privacy
(Wang, Han and Fu, arXiv:1202.3179): its section model (:mod:`.settings`), the mechanism
(:mod:`.mechanism`), the analyst's estimator (:mod:`.estimate`) and the verification of its
releases (:mod:`.audit`)."""

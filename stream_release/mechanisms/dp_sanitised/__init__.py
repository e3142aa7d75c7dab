"""``kind = "dp-sanitised"``: differential privacy in metric spaces (Holohan, Leith and Mason,
arXiv:1402.6124) over the sanitised table: its parameters (:mod:`.settings`), the mechanism
(:mod:`.mechanism`) and the verification of its releases (:mod:`.audit`)."""

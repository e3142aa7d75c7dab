"""The global guarantee (``[mechanism] kind = "global-guarantee"``, the default): the grouping
of R. C.-W. Wong, A. W.-C. Fu, J. Liu, K. Wang, Y. Xu, Preserving Individual Privacy in Serial
Data Publishing, ICDE 2010, with a per-individual history of linkages (Lemma 4) held to the
bound 1/l in every release ([WFLWX10] Theorem 1).

:mod:`.plan` groups one release and checks every bound; :mod:`.render` turns the plan into its
group lines and manifest; :mod:`.candidates` joins the virtual individuals of a population
register (§8); :mod:`.protected` checks the protected values against a release; :mod:`.parts`
merges the parts of a release cut on shards; :mod:`.feasibility` refuses a setting no grouping
can meet before any is tried.

References
----------
.. [WFLWX10] R. C.-W. Wong, A. W.-C. Fu, J. Liu, K. Wang, Y. Xu. Preserving Individual Privacy
   in Serial Data Publishing. ICDE 2010 (arXiv:0903.0682).
"""

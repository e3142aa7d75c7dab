"""Release mechanisms of the companion papers (``[mechanism] kind``): see :mod:`.base`."""

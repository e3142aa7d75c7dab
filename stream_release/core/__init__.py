"""The pure core: the encoded table, the privacy formulas, the grouping and the utility figures.

Nothing here does I/O or reads the clock; it imports only :mod:`stream_release.errors` and
itself (``tests/unit/test_layers.py``).
"""

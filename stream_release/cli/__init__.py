"""The ``stream-release`` command (:mod:`.main`) and its sub-commands that live apart: ``calc``,
``reconstruct`` and ``demo``."""

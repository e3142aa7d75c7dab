"""One release from a snapshot: plan it (:mod:`.plan`), render what is published
(:mod:`.render`) and publish it as the next of a series (:mod:`.publisher`); the what-if series
and the diagnosis of ``stream-release plan`` (:mod:`.what_if`, :mod:`.diagnosis`)."""

"""For the demo, the tests and the benchmarks: local Redis and broker processes
(:mod:`.local_services`), the bundled and shared data sets (:mod:`.datasets`); and the kill
points of the crash matrix (:mod:`.faults`), which production code calls and which do nothing
unless ``SR_FAULT`` names one."""

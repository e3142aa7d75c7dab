"""Helpers the tests share (plain functions and classes; the fixtures are in the
``conftest.py`` files). ``tests/`` is on ``sys.path`` (pyproject's pytest ``pythonpath``), so a
test imports them as ``from support.<module> import ...``; no test module imports another.

- :mod:`support.data`: Adult and wage-panel snapshots, series and configurations.
- :mod:`support.tables`: hand-built tables for the unit tests, and pseudonyms as inputs.
- :mod:`support.schemas`: the exported JSON Schemas as a check of documents.
- :mod:`support.services`: local services started for a block, a Redis namespace.
- :mod:`support.redis_cluster`: the Redis Cluster of the integration tests, its failovers.
- :mod:`support.kafka_broker`: the Apache Kafka node of the integration tests.
- :mod:`support.kafka_topics`: fresh topic names, reading a topic to its end.
- :mod:`support.worker`: ``stream-release worker`` as a subprocess, and the steps around it.
- :mod:`support.http`: the worker's ``/metrics`` and ``/health`` over HTTP.
- :mod:`support.mechanisms`: the configuration of each registered mechanism kind.
- :mod:`support.hostile_files`: snapshots, hierarchies and registers the command line refuses.
- :mod:`support.crash_runs`: one run of the crash-consistency tests.
- :mod:`support.service_runs`: the release service on Redis without a worker process.
- :mod:`support.worker_stubs`: stand-ins for the worker's producers and release service.
"""

"""The streaming service: wire models, Kafka I/O and the worker (CONTRACT §5)."""

"""The streaming side of stream_release (docs/contract.md §5).

* :mod:`stream_release.stream.kafka`: aiokafka client options built from
  :class:`~stream_release.config.KafkaSettings` (security included) and topic creation; every
  client error surfaces as :class:`~stream_release.errors.KafkaError`.
* :mod:`stream_release.stream.snapshot_sender`: ``stream-release publish``, one snapshot sent as its
  records (topic ``records``) and then its seal (topic ``control``).
"""

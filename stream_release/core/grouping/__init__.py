"""Grouping algorithms over int-encoded snapshots: encoding, generalization, bucketization."""

"""Releases cut on shards (partitions of the records topic) by several workers."""

"""What a release is worth: group sizes, information loss and count-query error.

:mod:`~stream_release.core.utility.groups` (group sizes, NCP, discernibility),
:mod:`~stream_release.core.utility.queries` (the count-query workload and its relative errors,
answered by :mod:`~stream_release.core.utility.query_index` and
:mod:`~stream_release.core.utility.query_kernels`) and
:mod:`~stream_release.core.utility.report` (the manifest's ``utility`` block). Each reads the
release's :class:`~stream_release.core.grouping.layout.ReleaseLayout` when given one.
"""

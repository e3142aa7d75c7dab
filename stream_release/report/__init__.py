"""The risk report of a published series (``stream-release report``): its figures read from the
files (:mod:`.figures`), the re-identification risks ARX and pycanon define (:mod:`.risk`),
and one self-contained HTML page of tables and inline SVG charts (:mod:`.page`, :mod:`.svg`).
"""

from __future__ import annotations

from pathlib import Path

from stream_release.report.figures import SeriesFigures, series_figures
from stream_release.report.page import render_page
from stream_release.report.risk import DEFAULT_THRESHOLD, ReleaseRisks, release_risks

__all__ = [
    "DEFAULT_THRESHOLD",
    "ReleaseRisks",
    "SeriesFigures",
    "release_risks",
    "render_page",
    "series_figures",
    "write_report",
]


def write_report(
    directory: Path,
    out: Path,
    private: Path | None = None,
    *,
    threshold: float = DEFAULT_THRESHOLD,
) -> SeriesFigures:
    """Write the report of the series in ``directory`` to ``out`` (with ``private``, the
    audit's verdict per release); returns its figures."""
    figures = series_figures(directory, private, threshold=threshold)
    out.write_text(render_page(figures), encoding="utf-8")
    return figures

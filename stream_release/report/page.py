"""The risk report of a series: one self-contained HTML page (``stream-release report``)."""

from __future__ import annotations

from collections import Counter
from html import escape

from stream_release.report.figures import ReleaseFigures, SeriesFigures
from stream_release.report.svg import Series, bar_chart, line_chart

__all__ = ["render_page"]

STYLE = """
body { font: 15px/1.45 system-ui, sans-serif; color: #1f2328; margin: 2em auto; max-width: 1180px;
  padding: 0 1em; }
h1 { font-size: 1.6em; margin-bottom: .2em; } h2 { font-size: 1.15em; margin: 1.6em 0 .3em; }
.verdict { font-size: 1.1em; padding: .6em .9em; border-radius: 6px; margin: .8em 0; }
.ok { background: #dafbe1; border: 1px solid #4ac26b; }
.warn { background: #fff1e5; border: 1px solid #d1242f; }
.grid-charts { display: grid; grid-template-columns: repeat(auto-fit, minmax(520px, 1fr));
  gap: 1.2em; }
figure { margin: 0; border: 1px solid #d1d9e0; border-radius: 6px; padding: .6em; }
figcaption { font-weight: 600; } .read { color: #59636e; font-size: .92em; margin: .2em 0 .4em; }
svg { width: 100%; height: auto; } svg text { font: 11px system-ui, sans-serif; fill: #59636e; }
svg .ylabel { text-anchor: end; } svg .xlabel { text-anchor: middle; }
svg .grid { stroke: #eaeef2; stroke-width: 1; } svg .legend { fill: #1f2328; }
table { border-collapse: collapse; font-size: .9em; margin-top: .5em; }
th, td { border-bottom: 1px solid #d1d9e0; padding: .25em .6em; text-align: right; }
th { background: #f6f8fa; } td.text, th.text { text-align: left; }
.notes { color: #59636e; font-size: .88em; } .fail { color: #d1242f; font-weight: 600; }
"""


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.2f} %"


def _num(value: float | None, fmt: str = ".4f") -> str:
    return "–" if value is None else f"{value:{fmt}}"


def _verdict(series: SeriesFigures) -> str:
    past = [r for r in series.releases if (r.spent_people or 0) > 0]
    guarantee = [r for r in series.releases if r.bound is not None]
    if not guarantee:
        text, css = "A companion mechanism's series: its guarantee is stated per release.", "ok"
    elif past:
        people = sum(r.spent_people or 0 for r in past)
        shown = ", ".join(r.label for r in past[:6]) + (" …" if len(past) > 6 else "")
        text = (
            f"{people} individual(s) passed the bound 1/ℓ across releases {shown}: past the "
            "series' horizon, the people withheld for their history are held to each release's "
            "bound only."
        )
        css = "warn"
    else:
        worst = max(r.breach_max or 0.0 for r in guarantee)
        text = (
            f"Nobody's breach probability passed 1/ℓ in any release: the largest, {worst:.4f}, "
            f"stays at or below {guarantee[-1].bound:.4f}."
        )
        css = "ok"
    failed = [r for r in series.releases if r.status and r.status != "ok"]
    if series.audited:
        text += (
            f" The audit recomputed every release from the files: {len(failed)} not ok."
            if failed
            else " The audit recomputed every release from the files: all ok."
        )
    return f'<p class="verdict {css if not failed else "warn"}">{escape(text)}</p>'


def _table(series: SeriesFigures) -> str:
    head = (
        "<tr><th>seq</th><th class=text>release</th><th>published</th><th>suppressed</th>"
        "<th>groups</th><th>avg / max size</th><th>breach.max</th><th>p99</th><th>1/ℓ</th>"
        "<th>past 1/ℓ (pairs)</th><th>prosecutor max / avg</th><th>records at risk</th>"
        "<th>query error med / trim / mean</th>"
        + ("<th class=text>audit</th>" if series.audited else "")
        + "</tr>"
    )
    rows = []
    for r in series.releases:
        avg = r.published / r.groups if r.groups else 0.0
        biggest = int(r.sizes.max()) if r.sizes.size else 0
        past = "–" if r.spent_people is None else f"{r.spent_people} ({r.spent_pairs})"
        status = ""
        if series.audited:
            css = "text" if r.status == "ok" else "text fail"
            status = f"<td class='{css}'>{escape(r.status or '–')}</td>"
        rows.append(
            f"<tr><td>{r.sequence}</td><td class=text>{escape(r.label)}</td>"
            f"<td>{r.published:,}</td><td>{_pct(r.suppression)}</td><td>{r.groups:,}</td>"
            f"<td>{avg:.2f} / {biggest}</td><td>{_num(r.breach_max)}</td>"
            f"<td>{_num(r.breach_p99)}</td><td>{_num(r.bound)}</td><td>{past}</td>"
            f"<td>{r.risks.prosecutor_highest:.4f} / {r.risks.prosecutor_average:.4f}</td>"
            f"<td>{_pct(r.risks.records_at_risk)}</td>"
            f"<td>{_num(r.query_median, '.3f')} / {_num(r.query_trimmed, '.3f')} / "
            f"{_num(r.query_mean, '.3f')}</td>{status}</tr>"
        )
    return f"<table>{head}{''.join(rows)}</table>"


def _figure(title: str, how: str, svg: str) -> str:
    return (
        f"<figure><figcaption>{escape(title)}</figcaption>"
        f'<p class="read">{escape(how)}</p>{svg}</figure>'
    )


def _size_histogram(release: ReleaseFigures) -> str:
    counts = Counter(int(s) for s in release.sizes.tolist())
    sizes = sorted(counts)[:40]
    labels = [str(s) for s in sizes]
    return bar_chart(
        "group sizes", labels, [Series("groups of this size", [counts[s] for s in sizes])]
    )


def _charts(series: SeriesFigures) -> str:
    releases = series.releases
    labels = [r.label for r in releases]
    charts = []
    if any(r.bound is not None for r in releases):
        charts.append(
            _figure(
                "Breach probability against 1/ℓ",
                "The largest and the 99th-percentile probability, over every person and "
                "protected value, that the person was linked to the value in any release so "
                "far; both must stay on or under the dashed bound.",
                line_chart(
                    "breach",
                    labels,
                    [
                        Series("breach.max", [r.breach_max for r in releases]),
                        Series("p99", [r.breach_p99 for r in releases]),
                        Series("1/ℓ", [r.bound for r in releases], dashed=True),
                    ],
                    fmt=".3g",
                ),
            )
        )
        charts.append(
            _figure(
                "People past 1/ℓ",
                "Individuals of each release whose probability for some value passed 1/ℓ, and "
                "their (person, value) pairs: 0 inside the horizon the series was planned for.",
                bar_chart(
                    "people past the bound",
                    labels,
                    [
                        Series("people", [r.spent_people for r in releases]),
                        Series("pairs", [r.spent_pairs for r in releases]),
                    ],
                ),
            )
        )
    charts.append(
        _figure(
            "Suppression",
            "The share of each snapshot's rows published only in the suppressed set (every QID "
            "*): the price of the guarantee in rows.",
            bar_chart(
                "suppression",
                labels,
                [Series("suppressed %", [100 * (r.suppression or 0.0) for r in releases])],
                fmt=".3g",
            ),
        )
    )
    charts.append(
        _figure(
            f"Group sizes, release {releases[-1].label}",
            "How many groups have each size in the last release: a group's size is the crowd "
            "each member hides in (its prosecutor risk is 1/size).",
            _size_histogram(releases[-1]),
        )
    )
    if any(r.query_median is not None for r in releases):
        charts.append(
            _figure(
                "Query error",
                "Relative error of random count queries on the published groups against the "
                "snapshot: the median and the 10 % trimmed mean beside the mean, which tiny "
                "true counts swing.",
                line_chart(
                    "query error",
                    labels,
                    [
                        Series("median", [r.query_median for r in releases]),
                        Series("trimmed", [r.query_trimmed for r in releases]),
                        Series("mean", [r.query_mean for r in releases], dashed=True),
                    ],
                ),
            )
        )
    charts.append(
        _figure(
            "Re-identification risk (ARX, pycanon)",
            f"Prosecutor risk 1/|group| per record: the highest, the average (ARX's success "
            f"rate, also the marketer risk) and the share of records above "
            f"{series.threshold:g}; without a population table the journalist risk equals it.",
            line_chart(
                "re-identification risk",
                labels,
                [
                    Series("highest", [r.risks.prosecutor_highest for r in releases]),
                    Series("average", [r.risks.prosecutor_average for r in releases]),
                    Series("records at risk", [r.risks.records_at_risk for r in releases]),
                ],
            ),
        )
    )
    return f'<div class="grid-charts">{"".join(charts)}</div>'


NOTES = (
    "The breach probability is the global guarantee of R. C.-W. Wong, A. W.-C. Fu, J. Liu, "
    "K. Wang, Y. Xu, Preserving Individual Privacy in Serial Data Publishing, ICDE 2010 "
    "(Lemma 4), over all releases together. The re-identification risks are one release's, "
    "computed as ARX does (F. Prasser et al., Flexible data anonymization using ARX, Software: "
    "Practice and Experience 50(7), 2020; after K. El Emam, F. K. Dankar, JAMIA 15(5), 2008); "
    "the smallest group is pycanon's k (J. Sáinz-Pardo Díaz, Á. López García, Scientific Data "
    "9, 2022). The suppressed rows count as one more group. The figures come from the "
    "published files only; the audit column, when present, recomputes them from the private "
    "files too."
)


def render_page(series: SeriesFigures) -> str:
    """The whole page of ``series``."""
    n = len(series.releases)
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        f"<title>stream-release report: {escape(series.name)}</title>"
        f"<style>{STYLE}</style></head><body>"
        f"<h1>Privacy report: {escape(series.name)}</h1>"
        f"<p>{n} release{'s' if n != 1 else ''}, {series.releases[0].label} to "
        f"{series.releases[-1].label}.</p>"
        f"{_verdict(series)}<h2>Per release</h2>{_table(series)}<h2>Charts</h2>"
        f"{_charts(series)}<p class=notes>{escape(NOTES)}</p></body></html>\n"
    )

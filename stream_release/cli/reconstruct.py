"""``stream-release reconstruct DIR --value S [--where attr=value ...] [--release N] [--json]``.

The analyst's side of ``reconstruction-private-rr``: reads the published files of a series
(docs/contract.md §4: ``manifest-NNNN.json`` and ``release-NNNN.jsonl``, never the private
assignments) and answers ``COUNT(*) WHERE <QID predicate> AND <sensitive> = S`` per release
with :func:`stream_release.mechanisms.reconstruction_rr.estimate.reconstruct` (Lemma 1 of
[WHF12], unbiased by Theorem 5.18), its variance, standard error and a 95 % interval.

Thin, like :mod:`stream_release.cli.calc`: the estimator, its validation and its citations live in
the library. ``--where attr=value`` compares the attribute's exact published QID value (a
reconstruction-private release publishes exact QIDs) with ``value`` as text, or as a number
when the published value is one; an attribute given several times matches any of its values,
and several attributes must all match. A directory without such releases, an unknown
attribute, a value outside the release's sensitive domain or a release not in the directory
raises a :class:`~stream_release.errors.StreamReleaseError`, which ``cli.main`` prints as one
line (exit 2); nothing is printed before every selected release has been estimated.

Notes
-----
The interval is the normal approximation ``estimate ± z SE`` with ``z = Φ⁻¹(0.975)``,
unclipped like the estimate. Releases of one series share sticky randomized values, so their
estimates are correlated: do not average them as independent. A release in which no published
group matches the predicate has no estimate (``null`` in JSON), as in the library; if no
selected release has a matching group the command fails (a mistyped value, most likely).

References
----------
.. [WHF12] K. Wang, C. Han, A. W.-C. Fu. Randomization Resilient To Sensitive
   Reconstruction. arXiv:1202.3179, 2012.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from statistics import NormalDist
from typing import Any

from stream_release.errors import InvalidParameter, StreamReleaseError
from stream_release.io.release_files import ReleasePaths, published_sequences

CONFIDENCE = 0.95
Z = NormalDist().inv_cdf(0.5 + CONFIDENCE / 2)
"""``Φ⁻¹(0.975) = 1.959964``: the half-width of the interval in standard errors."""

HEADER = (
    "aggregate reconstruction: Lemma 1 of Wang-Han-Fu, arXiv:1202.3179 (unbiased by "
    "Theorem 5.18); 95 % interval = estimate ± 1.96 standard errors"
)


@dataclass(frozen=True)
class ReleaseEstimate:
    """The answer for one release (``estimate`` and below are ``None`` when no published group
    matches the predicate)."""

    sequence: int
    release: str
    groups: int
    """Published groups matching the predicate."""
    rows: int
    """``|S|``: published rows of those groups."""
    observed: int
    """``O*``: those rows publishing the value."""
    estimate: float | None
    frequency: float | None
    variance: float | None
    standard_error: float | None
    ci95: tuple[float, float] | None


def add_reconstruct_parser(sub: Any) -> None:
    """Add ``reconstruct`` to the ``stream-release`` sub-parsers."""
    parser = sub.add_parser(
        "reconstruct",
        help="estimate a count from a reconstruction-private-rr series, with its variance",
        description="Estimated COUNT(*) of the rows with sensitive value S among the published "
        "groups matching the --where filters, per release of a reconstruction-private-rr "
        "series, with its variance, standard error and 95 % interval (Lemma 1 of Wang-Han-Fu, "
        "arXiv:1202.3179). Reads only the published files of DIR.",
    )
    parser.add_argument("directory", type=Path, help="the series' release files")
    parser.add_argument("--value", required=True, help="the sensitive value S to count")
    parser.add_argument(
        "--where",
        type=_filter,
        action="append",
        default=[],
        metavar="ATTR=VALUE",
        help="QID filter; an attribute given several times matches any of its values",
    )
    parser.add_argument(
        "--release", type=int, default=None, metavar="N", help="only release (sequence) N"
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.set_defaults(run=_run)


def _filter(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name.strip():
        raise argparse.ArgumentTypeError(f"{text!r}: give ATTR=VALUE, e.g. sex=Female")
    return name.strip(), value


def _run(args: argparse.Namespace) -> int:
    wanted: dict[str, list[str]] = {}
    for name, value in args.where:
        wanted.setdefault(name, []).append(value)
    releases = load_releases(args.directory, args.release)
    estimates = [
        estimate_release(manifest, lines, args.value, wanted) for manifest, lines in releases
    ]
    if not any(e.groups for e in estimates):
        shown = " and ".join(f"{k} in {v}" for k, v in wanted.items())
        raise InvalidParameter(
            f"where: no published group of {str(args.directory)!r} matches {shown}"
            + (f" in release {args.release}" if args.release is not None else "")
            + "; check the values against the group lines' qid"
        )
    manifest = releases[0][0]
    sensitive = (manifest.get("schema") or {}).get("sensitive", "sensitive")
    if args.json:
        out = {
            "directory": str(args.directory),
            "value": args.value,
            "sensitive": sensitive,
            "where": wanted,
            "confidence": CONFIDENCE,
            "releases": [asdict(e) for e in estimates],
        }
        print(json.dumps(out))
    else:
        print(_text(args.value, sensitive, wanted, estimates))
    return 0


def load_releases(
    directory: Path, release: int | None = None
) -> list[tuple[dict[str, Any], list[dict[str, Any]]]]:
    """``(manifest, group lines)`` of every release in ``directory`` (or only ``release``), in
    sequence order, after checking that the series is ``reconstruction-private-rr``.

    Raises
    ------
    StreamReleaseError
        ``directory`` is not a directory of releases, holds releases of another kind, has no
        release ``release``, or a file cannot be read.
    """
    from stream_release.config.mechanisms.reconstruction_rr import KIND

    if not directory.is_dir():
        raise StreamReleaseError(f"{str(directory)!r} is not a directory of releases")
    sequences = published_sequences(directory)
    if not sequences:
        raise StreamReleaseError(
            f"{str(directory)!r} holds no manifest-NNNN.json: not a directory of releases"
        )
    from stream_release.audit.files import check_manifest, read_json, read_lines

    manifests = {}
    for seq in sequences:
        path = ReleasePaths(directory, seq).manifest
        manifests[seq] = read_json(path)
        kind = check_manifest(path, manifests[seq]).kind
        if kind != KIND:
            raise StreamReleaseError(
                f"{str(directory)!r}: release {seq} is of mechanism kind {kind!r}; reconstruct "
                f"estimates counts from a {KIND!r} series only"
            )
    if release is not None:
        if release not in manifests:
            raise StreamReleaseError(
                f"--release {release}: {str(directory)!r} holds releases "
                f"{_ranges(sequences)}; pick one of them"
            )
        sequences = [release]
    return [(manifests[seq], read_lines(ReleasePaths(directory, seq).groups)) for seq in sequences]


def estimate_release(
    manifest: Mapping[str, Any],
    lines: Sequence[Mapping[str, Any]],
    value: str,
    where: Mapping[str, Sequence[str]],
) -> ReleaseEstimate:
    """The library's estimate for one release, the ``--where`` texts matched to the published
    QID values (:func:`_typed_where`)."""
    from stream_release.mechanisms.reconstruction_rr.estimate import reconstruct

    typed = _typed_where(manifest, lines, where)
    chosen = [
        line
        for line in lines
        if all((line.get("qid") or {}).get(k) in allowed for k, allowed in typed.items())
    ]
    sequence, label = int(manifest.get("sequence", 0)), str(manifest.get("release", ""))
    if not chosen:
        _check_value(manifest, value)
        return ReleaseEstimate(sequence, label, 0, 0, 0, None, None, None, None, None)
    # the library checks the value against the domain and computes Lemma 1
    answer = reconstruct(lines, manifest, value, typed)
    half = Z * answer.standard_error
    return ReleaseEstimate(
        sequence,
        label,
        len(chosen),
        answer.size,
        answer.observed,
        answer.estimate,
        answer.frequency,
        answer.variance,
        answer.standard_error,
        (answer.estimate - half, answer.estimate + half),
    )


def _typed_where(
    manifest: Mapping[str, Any],
    lines: Sequence[Mapping[str, Any]],
    where: Mapping[str, Sequence[str]],
) -> dict[str, list[Any]]:
    """``where`` with each text replaced by the published values it denotes (a text, or a
    number equal to it); an attribute that is not a QID of the release is refused."""
    names = list((manifest.get("schema") or {}).get("qid") or ())
    if not names and lines:
        names = list(lines[0].get("qid") or {})
    unknown = [name for name in where if name not in names]
    if unknown:
        raise InvalidParameter(
            f"--where {unknown[0]}: not a QID of release {manifest.get('sequence')} "
            f"(its QIDs: {', '.join(names)})"
        )
    published: dict[str, set[Any]] = {name: set() for name in where}
    for line in lines:
        qid = line.get("qid") or {}
        for name, seen in published.items():
            v = qid.get(name)
            if isinstance(v, str | int | float) and not isinstance(v, bool):
                seen.add(v)
    return {
        name: sorted((v for v in published[name] if any(_denotes(t, v) for t in texts)), key=str)
        for name, texts in where.items()
    }


def _denotes(text: str, value: str | float) -> bool:
    if isinstance(value, str):
        return text == value
    try:
        return float(text) == value
    except ValueError:
        return False


def _check_value(manifest: Mapping[str, Any], value: str) -> None:
    block = manifest.get("mechanism")
    domain = list((block if isinstance(block, Mapping) else {}).get("domain") or ())
    if value not in domain:
        raise InvalidParameter(
            f"value = {value!r}: not in the release's sensitive domain {domain}; pick one of them"
        )


def _ranges(sequences: Sequence[int]) -> str:
    if sequences == list(range(sequences[0], sequences[-1] + 1)):
        return f"{sequences[0]}..{sequences[-1]}"
    return ", ".join(map(str, sequences))


def _text(
    value: str,
    sensitive: str,
    where: Mapping[str, Sequence[str]],
    estimates: Sequence[ReleaseEstimate],
) -> str:
    terms = [
        f"{name} = {texts[0]}" if len(texts) == 1 else f"{name} IN ({', '.join(texts)})"
        for name, texts in where.items()
    ]
    query = "COUNT(*) WHERE " + " AND ".join([*terms, f"{sensitive} = {value}"])
    columns = ("release", "label", "groups", "rows", "estimate", "variance", "std_error", "ci95")
    rows = [columns]
    for e in estimates:
        if e.estimate is None or e.variance is None or e.standard_error is None or not e.ci95:
            numbers = ("-", "-", "-", "no published group matches")
        else:
            numbers = (
                f"{e.estimate:.2f}",
                f"{e.variance:.2f}",
                f"{e.standard_error:.2f}",
                f"[{e.ci95[0]:.2f}, {e.ci95[1]:.2f}]",
            )
        rows.append((str(e.sequence), e.release, str(e.groups), str(e.rows), *numbers))
    widths = [max(len(r[i]) for r in rows) for i in range(len(columns) - 1)]
    table = []
    for r in rows:
        cells = [
            c.ljust(w) if i == 1 else c.rjust(w)
            for i, (c, w) in enumerate(zip(r[:-1], widths, strict=True))
        ]
        table.append("  ".join([*cells, r[-1]]))
    return "\n".join([query, HEADER, *table])

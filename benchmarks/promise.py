"""The promise over a whole series: people past 1/l, values the minimality attack pins, and what
the settings cost, before and after (issue 26).

Series: the churn population of ``benchmarks/load.py`` on Adult (``ChurnPopulation``: Adult
rows drawn to ``--rows`` per release, paper §8 churn: 20 % of a snapshot carried over, 20 % of
those values redrawn; seed 0), ``--releases`` releases, published offline (``anonymize``'s
code, a file history) under two settings (l = 2, min_group_size 2, default grouping, ARX's
Adult hierarchies):

* ``k'=3 all``: constant-ratio k' = 3, every occupation protected, no horizon: the settings
  of issue 26's measurements (they last 3 releases);
* ``planned``: constant-ratio k' = horizon = the series' length, the occupations held by at
  most 0.9 / n_c of Adult's rows protected (the demo's rule, ``stream_release.cli.demo``).

``--before REV`` publishes the first setting with the package of git revision ``REV`` too (a
temporary ``git worktree`` on ``PYTHONPATH``), in the same run. Every series is then read by the
same code, this checkout's:

* people past 1/l: the individuals of a release with a (individual, protected value) pair
  whose breach, recomputed from the files with the audit's exact ledger, is above 1/l;
* the minimality attack of ``tests/support/minimality.py``: its claims, how many are right,
  and how many are certain (pinned);
* suppressed and withheld rows (the private record: ``withheld``, or ``forced`` before),
  group sizes and the median and 10 % trimmed query error of the manifests (the query error
  of REV counts the suppressed rows: compare its medians with care).

Usage::

    python benchmarks/promise.py [--rows 30000] [--releases 12] [--before REV]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DEFAULT_DATA_DIR = REPO.parent / "shared" / "data"
RESULTS = HERE / "results"
KEY = "promise-benchmark-key-0123456789abcdef"

RUN = """
import os, sys
from pathlib import Path
from stream_release.config import load_settings
from stream_release.pipeline.anonymize import anonymize_files
config, out, *snaps = sys.argv[1:]
settings = load_settings(Path(config), history={"key": os.environ["SR_PROMISE_KEY"]})
anonymize_files(settings, Path(out), [Path(s) for s in snaps])
"""


def write_series(data: Path, work: Path, rows: int, releases: int) -> list[Path]:
    from stream_release.devtools.datasets import (
        ADULT_QID,
        ADULT_SENSITIVE,
        ChurnPopulation,
        Table,
        read_csv_table,
    )

    population = ChurnPopulation(
        read_csv_table(data / "adult.csv"), ADULT_QID, ADULT_SENSITIVE, rows, seed=0
    )
    paths = []
    for r in range(1, releases + 1):
        ids, qid, sensitive = population.advance()
        path = work / f"c{r:02d}.csv"
        Table({"id": ids, **qid, ADULT_SENSITIVE: sensitive}).write_csv(path)
        paths.append(path)
    return paths


def write_config(data: Path, path: Path, privacy: dict[str, Any]) -> Path:
    from stream_release.devtools.datasets import ADULT_QID, ADULT_SENSITIVE

    hierarchies = "\n".join(f'"{a}" = "{data / f"adult_hierarchy_{a}.csv"}"' for a in ADULT_QID)
    lines = [f"{k} = {json.dumps(v)}" for k, v in privacy.items()]
    path.write_text(
        f'[schema]\nid = "id"\nsensitive = "{ADULT_SENSITIVE}"\nqid = {json.dumps(ADULT_QID)}\n'
        f"[schema.hierarchies]\n{hierarchies}\n[privacy]\nl = 2\n"
        'strategy = "constant-ratio"\n' + "\n".join(lines) + "\n"
    )
    return path


def publish(package: Path | None, config: Path, out: Path, snaps: list[Path]) -> float:
    env = {**os.environ, "SR_PROMISE_KEY": KEY}
    if package is not None:
        env["PYTHONPATH"] = str(package)
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-c", RUN, str(config), str(out), *map(str, snaps)],
        check=True,
        env=env,
        cwd=str(package or REPO),
    )
    return time.perf_counter() - started


def measure(out: Path, snaps: list[Path]) -> list[dict[str, Any]]:
    sys.path.insert(0, str(REPO / "tests"))
    from support.minimality import attack_series

    from stream_release.devtools.datasets import ADULT_SENSITIVE

    private = Path(f"{out}.private")
    report = attack_series(out, private, snaps, id_column="id", sensitive=ADULT_SENSITIVE)
    rows: list[dict[str, Any]] = []
    for k in range(1, len(snaps) + 1):
        manifest = json.loads((out / f"manifest-{k:04d}.json").read_text())
        record = json.loads((private / f"private-{k:04d}.json").read_text())["suppressed"]
        withheld = record.get("withheld", record.get("forced", []))
        u = manifest["utility"]
        rows.append(
            {
                "release": k,
                "rows": manifest["records_in"],
                "suppressed": manifest["suppressed"],
                "withheld": len(withheld) if isinstance(withheld, list) else withheld,
                "past": report.past_people[k - 1],
                "claims": sum(1 for c in report.claims if c[0] == k),
                "right": sum(1 for c in report.claims if c[0] == k and c[3]),
                "pins": sum(1 for c in report.pins if c[0] == k),
                "avg": u["avg_group_size"],
                "max": u["max_group_size"],
                "median": u["query_error_median"],
                "trimmed": u["query_error_trimmed"],
            }
        )
    rows[-1]["past_ever"] = len(report.past_ever)
    return rows


def table(name: str, seconds: float, rows: list[dict[str, Any]]) -> list[str]:
    out = [
        f"### {name} ({seconds:.1f} s)",
        "",
        "release | rows | suppressed | withheld | people past 1/l | attack claims (right) | "
        "pinned | avg group | max | query error median | trimmed",
        "--- | --- | --- | --- | --- | --- | --- | --- | --- | --- | ---",
    ]
    for r in rows:
        out.append(
            f"{r['release']} | {r['rows']} | {r['suppressed']} | {r['withheld']} | {r['past']} | "
            f"{r['claims']} ({r['right']}) | {r['pins']} | {r['avg']:.2f} | {r['max']} | "
            f"{r['median']:.3f} | {r['trimmed']:.3f}"
        )
    total = {k: sum(r[k] for r in rows) for k in ("suppressed", "past", "claims", "right", "pins")}
    out.append(
        f"all | {sum(r['rows'] for r in rows)} | {total['suppressed']} | | {total['past']} "
        f"({rows[-1]['past_ever']} distinct) | {total['claims']} ({total['right']}) | "
        f"{total['pins']} | | | | "
    )
    return [*out, ""]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=30_000)
    parser.add_argument("--releases", type=int, default=12)
    parser.add_argument("--before", default=None, help="a git revision to compare with")
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    args = parser.parse_args(argv)
    sys.path.insert(0, str(REPO))
    from stream_release.cli.demo import demo_privacy

    k_prime, protected = demo_privacy(args.releases)
    settings = {
        "k'=3 all": {"k_prime": 3},
        "planned": {"k_prime": k_prime, "horizon": args.releases, "protected": protected},
    }
    lines = [
        f"# The promise over a series: {args.releases} releases of {args.rows:,} rows",
        "",
        f"`python benchmarks/promise.py --rows {args.rows} --releases {args.releases}"
        + (f" --before {args.before}`" if args.before else "`"),
        "",
    ]
    with tempfile.TemporaryDirectory(prefix="promise-") as tmp:
        work = Path(tmp)
        snaps = write_series(args.data_dir, work, args.rows, args.releases)
        runs: list[tuple[str, Path | None, dict[str, Any]]] = []
        before = None
        if args.before:
            before = work / "before"
            subprocess.run(
                ["git", "-C", str(REPO), "worktree", "add", "--detach", str(before), args.before],
                check=True,
                capture_output=True,
            )
            runs.append((f"{args.before}, k'=3 all", before, settings["k'=3 all"]))
        runs += [(f"now, {name}", None, privacy) for name, privacy in settings.items()]
        try:
            for i, (name, package, privacy) in enumerate(runs):
                config = write_config(args.data_dir, work / f"config-{i}.toml", privacy)
                out = work / f"out-{i}"
                seconds = publish(package, config, out, snaps)
                lines += table(name, seconds, measure(out, snaps))
                print("\n".join(lines[-(args.releases + 6) :]), flush=True)
        finally:
            if before is not None:
                subprocess.run(
                    ["git", "-C", str(REPO), "worktree", "remove", "--force", str(before)],
                    check=False,
                )
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "promise.md").write_text("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

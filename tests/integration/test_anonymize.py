"""``stream-release anonymize`` and ``audit`` end to end on real data (docs/contract.md §3, §4)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from support.data import adult_series, write_config

from stream_release.audit import audit_directory
from stream_release.cli.main import main
from stream_release.errors import PrivacyLeakWarning


def test_adult_series_passes_the_audit_and_continues(shared_data: Path, tmp_path: Path) -> None:
    config = write_config(tmp_path, shared_data)
    snaps = adult_series(shared_data, tmp_path, 20, rounds=4)
    out = tmp_path / "out"
    assert (
        main(["anonymize", "--config", str(config), "--out", str(out), *map(str, snaps[:2])]) == 0
    )
    # running again continues the series: releases 3 and 4
    assert (
        main(["anonymize", "--config", str(config), "--out", str(out), *map(str, snaps[2:])]) == 0
    )
    manifests = [json.loads((out / f"manifest-{k:04d}.json").read_text()) for k in range(1, 5)]
    assert [m["sequence"] for m in manifests] == [1, 2, 3, 4]
    assert [m["release"] for m in manifests] == ["t01", "t02", "t03", "t04"]
    for m in manifests:
        assert m["breach"]["max"] <= 0.5 + 1e-9
        assert m["published"] + m["suppressed"] == m["records_in"]
        for key in (
            "avg_group_size",
            "max_group_size",
            "suppression",
            "ncp",
            "discernibility",
            "query_error",
        ):
            assert key in m["utility"]
    # carried-over individuals accumulate history: release 2's worst breach exceeds release 1's
    assert manifests[1]["breach"]["max"] > manifests[0]["breach"]["max"]
    report = audit_directory(out)
    assert report.ok, report.table()
    assert main(["audit", str(out)]) == 0


def test_audit_detects_a_tampered_group(shared_data: Path, tmp_path: Path) -> None:
    config = write_config(tmp_path, shared_data)
    snaps = adult_series(shared_data, tmp_path, 20, rounds=1)
    out = tmp_path / "out"
    assert main(["anonymize", "--config", str(config), "--out", str(out), str(snaps[0])]) == 0
    path = out / "release-0001.jsonl"
    lines = path.read_text().splitlines()
    first = json.loads(lines[0])
    value = next(iter(first["sensitive"]))
    first["sensitive"][value] += 1
    first["size"] += 1
    lines[0] = json.dumps(first)
    path.write_text("\n".join(lines) + "\n")
    assert main(["audit", str(out)]) == 1


def test_audit_detects_a_group_whose_values_differ_from_its_rows(
    shared_data: Path, tmp_path: Path
) -> None:
    config = write_config(tmp_path, shared_data)
    snaps = adult_series(shared_data, tmp_path, 20, rounds=1)
    out = tmp_path / "out"
    assert main(["anonymize", "--config", str(config), "--out", str(out), str(snaps[0])]) == 0
    path = out / "release-0001.jsonl"
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    # swap one value between two groups: sizes and counts still add up
    a = lines[0]["sensitive"]
    b = next(x["sensitive"] for x in lines[1:] if set(x["sensitive"]) - set(a))
    va = next(v for v in a if v not in b)
    vb = next(v for v in b if v not in a)
    a[vb] = a.pop(va)
    b[va] = b.pop(vb)
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    report = audit_directory(out)
    assert not report.ok
    assert "published sensitive values differ from its rows" in report.table()


def test_localized_baseline_breaches_on_a_real_series(shared_data: Path, tmp_path: Path) -> None:
    config = write_config(tmp_path, shared_data, strategy="localized", acknowledge_localized=True)
    snaps = adult_series(shared_data, tmp_path, 20, rounds=5)
    out = tmp_path / "out"
    with pytest.warns(PrivacyLeakWarning, match="does not meet the global guarantee"):
        assert (
            main(["anonymize", "--config", str(config), "--out", str(out), *map(str, snaps)]) == 0
        )
    report = audit_directory(out)
    assert not report.ok
    worst = max(r.breach_max for r in report.releases)
    assert worst > 0.5 + 1e-3
    assert main(["audit", str(out)]) == 1


def test_anatomy_format_publishes_members_not_qids(shared_data: Path, tmp_path: Path) -> None:
    config = write_config(tmp_path, shared_data)
    config.write_text(config.read_text().replace("[output]\n", '[output]\nformat = "anatomy"\n'))
    snaps = adult_series(shared_data, tmp_path, 20, rounds=2)
    out = tmp_path / "out"
    assert main(["anonymize", "--config", str(config), "--out", str(out), *map(str, snaps)]) == 0
    line = json.loads((out / "release-0001.jsonl").read_text().splitlines()[0])
    assert "qid" not in line
    assert len(line["members"]) == line["size"]
    assert set(line["members"][0]) == {
        "age",
        "sex",
        "race",
        "marital-status",
        "education",
        "native-country",
        "workclass",
    }
    assert audit_directory(out).ok


@pytest.mark.integration
def test_redis_history_gives_the_same_releases_as_the_file_history(
    shared_data: Path,
    tmp_path: Path,
    redis_url: str,
    redis_prefix: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    config = write_config(tmp_path, shared_data)
    snaps = adult_series(shared_data, tmp_path, 20, rounds=3)
    monkeypatch.setenv("SR_HISTORY_KEY", "k" * 32)
    monkeypatch.setenv("SR_HISTORY_PREFIX", redis_prefix)
    by_file, by_redis = tmp_path / "file", tmp_path / "redis"
    assert (
        main(["anonymize", "--config", str(config), "--out", str(by_file), *map(str, snaps)]) == 0
    )
    assert (
        main(
            [
                "anonymize",
                "--config",
                str(config),
                "--out",
                str(by_redis),
                "--history",
                redis_url,
                *map(str, snaps),
            ]
        )
        == 0
    )
    for k in range(1, 4):
        assert (by_file / f"release-{k:04d}.jsonl").read_bytes() == (
            by_redis / f"release-{k:04d}.jsonl"
        ).read_bytes()
        a = json.loads((by_file / f"manifest-{k:04d}.json").read_text())
        b = json.loads((by_redis / f"manifest-{k:04d}.json").read_text())
        a.pop("elapsed_s"), b.pop("elapsed_s")
        assert a == b
    assert audit_directory(by_redis).ok
    # raw ids never reach Redis
    import redis

    client = redis.Redis.from_url(redis_url)
    ids = np.loadtxt(snaps[0], delimiter=";", skiprows=1, usecols=0, dtype=str)[:50]
    keys = b" ".join(client.scan_iter(match=f"{redis_prefix}:*"))
    assert keys
    assert not any(i.encode() in keys for i in ids)


def test_minimal_strategy_runs_into_theorem_2s_dead_end(shared_data: Path, tmp_path: Path) -> None:
    # planning at Theorem 1's minimum keeps every bound but pushes breaches towards 1/l, after
    # which carried-over individuals need ever larger groups and start being suppressed
    config = write_config(tmp_path, shared_data, strategy="minimal")
    snaps = adult_series(shared_data, tmp_path, 20, rounds=4)
    out = tmp_path / "out"
    assert main(["anonymize", "--config", str(config), "--out", str(out), *map(str, snaps)]) == 0
    manifests = [json.loads((out / f"manifest-{k:04d}.json").read_text()) for k in range(1, 5)]
    # (breach.max is over each release's own individuals, so it need not rise every release;
    # the pseudonym key, random per offline history, changes the row order and the groups)
    breach = [m["breach"]["max"] for m in manifests]
    assert breach[0] < 0.34 and all(0.45 < b <= 0.5 + 1e-9 for b in breach[2:])
    assert manifests[0]["suppressed"] == 0 and manifests[-1]["suppressed"] > 0
    assert audit_directory(out).ok

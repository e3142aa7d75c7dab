"""The paper's motivating example (Wong et al. 2010, Figures 1, 2 and 4) through the whole pipeline.

T1 and T2 of Figure 1 published with per-release 2-diversity (the localized baseline) link o2
to chlamydia with probability 3/4 > 1/2 (Example 2), and the audit says so; the global
guarantee, protecting chlamydia as Figure 4 does, needs groups of 4 and gives 7/16.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stream_release.audit import audit_directory
from stream_release.cli.main import main
from stream_release.errors import PrivacyLeakWarning

T1 = (
    "id,sex,zipcode,disease\n"
    "o1,M,65001,flu\no2,M,65002,chlamydia\no3,F,65014,flu\no4,F,65015,fever\n"
)
T2 = (
    "id,sex,zipcode,disease\n"
    "o1,M,65001,chlamydia\no2,M,65002,flu\no3,F,65014,fever\no5,F,65010,flu\n"
)


def _setup(tmp_path: Path, privacy: str) -> list[str]:
    (tmp_path / "t1.csv").write_text(T1)
    (tmp_path / "t2.csv").write_text(T2)
    (tmp_path / "c.toml").write_text(
        '[schema]\nid = "id"\nsensitive = "disease"\nqid = ["sex", "zipcode"]\n'
        f"[privacy]\nl = 2\n{privacy}\n[output]\nqueries = 50\n"
    )
    return [
        "--config",
        str(tmp_path / "c.toml"),
        "--out",
        str(tmp_path / "out"),
        str(tmp_path / "t1.csv"),
        str(tmp_path / "t2.csv"),
    ]


def test_localized_guarantee_breaches_as_in_example_2(tmp_path: Path) -> None:
    baseline = 'strategy = "localized"\nacknowledge_localized = true'
    with pytest.warns(PrivacyLeakWarning):
        assert main(["anonymize", *_setup(tmp_path, baseline)]) == 0
    first = [json.loads(x) for x in (tmp_path / "out/release-0001.jsonl").read_text().splitlines()]
    # Figure 2: two groups of two, split by sex, each 2-diverse
    assert sorted(g["size"] for g in first) == [2, 2]
    assert sorted(g["qid"]["sex"] for g in first) == ["F", "M"]
    report = audit_directory(tmp_path / "out")
    assert not report.ok
    assert abs(report.releases[1].breach_max - 0.75) < 1e-12
    assert main(["audit", str(tmp_path / "out")]) == 1
    # every manifest states the acknowledged baseline, and the audit holds it to it
    path = tmp_path / "out/manifest-0001.json"
    manifest = json.loads(path.read_text())
    assert manifest["strategy"]["acknowledged"] == ["acknowledge_localized"]
    assert not any("acknowledge" in p for p in report.releases[0].problems)
    del manifest["strategy"]["acknowledged"]
    path.write_text(json.dumps(manifest))
    assert any(
        "does not state acknowledge_localized" in p
        for p in audit_directory(tmp_path / "out").releases[0].problems
    )


def test_global_guarantee_on_chlamydia_as_in_figure_4(tmp_path: Path) -> None:
    privacy = 'strategy = "constant-ratio"\nk_prime = 2\nprotected = ["chlamydia"]'
    assert main(["anonymize", *_setup(tmp_path, privacy)]) == 0
    for k in (1, 2):
        groups = [
            json.loads(x)
            for x in (tmp_path / f"out/release-{k:04d}.jsonl").read_text().splitlines()
        ]
        assert [g["size"] for g in groups] == [4]  # n_c(2, 2) = 3.41: one group of 4
    report = audit_directory(tmp_path / "out")
    assert report.ok, report.table()
    assert abs(report.releases[1].breach_max - 7 / 16) < 1e-12
    assert (
        "acknowledged"
        not in json.loads((tmp_path / "out/manifest-0001.json").read_text())["strategy"]
    )


def test_audit_config_fails_when_the_protected_values_differ(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``audit --config``: each manifest's protected values, ``l`` and strategy against the
    configuration's (issue 26, item 4)."""
    privacy = 'strategy = "constant-ratio"\nk_prime = 2\nprotected = ["chlamydia"]'
    argv = _setup(tmp_path, privacy)
    assert main(["anonymize", *argv]) == 0
    config, out = tmp_path / "c.toml", str(tmp_path / "out")
    assert main(["audit", out, "--config", str(config)]) == 0
    text = config.read_text()
    for change, finding in [
        ('protected = ["flu"]', "strategy.protected = ['chlamydia'] but the configuration gives "
         "['flu']"),
        ('protected = ["chlamydia", "flu"]', "strategy.protected = ['chlamydia'] but the "
         "configuration gives ['chlamydia', 'flu']"),
        ("protected = []", "strategy.protected = ['chlamydia'] but the configuration gives []"),
    ]:  # fmt: skip
        config.write_text(text.replace('protected = ["chlamydia"]', change))
        capsys.readouterr()
        assert main(["audit", out, "--config", str(config)]) == 1
        assert f"manifest {finding}" in capsys.readouterr().out
    config.write_text(text.replace("l = 2", "l = 3"))
    assert main(["audit", out, "--config", str(config)]) == 1
    assert "manifest l = 2.0 but the configuration gives 3.0" in capsys.readouterr().out
    # a series published before the check with a misspelled value (the case): the
    # manifests and the configuration agree, and the audit fails all the same
    config.write_text(text.replace('"chlamydia"', '"Chlamydia "'))
    for k in (1, 2):
        path = tmp_path / f"out/manifest-{k:04d}.json"
        manifest = json.loads(path.read_text())
        manifest["strategy"]["protected"] = ["Chlamydia "]
        path.write_text(json.dumps(manifest))
    assert main(["audit", out, "--config", str(config)]) == 1
    assert (
        "manifest strategy.protected names 'Chlamydia ', which no row of the release holds, "
        "while 'chlamydia' (the same up to case and blanks) is not protected"
    ) in capsys.readouterr().out


def test_protecting_every_value_of_figure_1_is_infeasible(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # flu is half of T1: no group can have a ratio above 2, but constant-ratio needs 3.41
    assert main(["anonymize", *_setup(tmp_path, 'strategy = "constant-ratio"\nk_prime = 2')]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "'flu'" in err and "largest feasible setting" in err
    assert not list((tmp_path / "out").glob("*-0001.*"))  # nothing half-written


def test_groups_of_a_single_unprotected_value_update_the_history(tmp_path: Path) -> None:
    # only chlamydia protected: the other rows may form groups holding one value (p = 1 for an
    # unprotected value, log P = -inf) and the release must go through without a warning
    (tmp_path / "t.csv").write_text(
        "id,sex,zipcode,disease\n"
        + "".join(f"o{i},M,{65000 + i},flu\n" for i in range(6))
        + "c1,F,65100,chlamydia\nc2,F,65101,fever\nc3,F,65102,fever\nc4,F,65103,cold\n"
    )
    (tmp_path / "c.toml").write_text(
        '[schema]\nid = "id"\nsensitive = "disease"\nqid = ["sex", "zipcode"]\n'
        '[privacy]\nl = 2\nk_prime = 2\nprotected = ["chlamydia"]\n[output]\nqueries = 20\n'
    )
    out = tmp_path / "out"
    args = ["anonymize", "--config", str(tmp_path / "c.toml"), "--out", str(out)]
    assert main([*args, str(tmp_path / "t.csv")]) == 0
    assert main([*args, str(tmp_path / "t.csv")]) == 0  # the same people again
    groups = [json.loads(x) for x in (out / "release-0001.jsonl").read_text().splitlines()]
    assert any(g["sensitive"] == {"flu": g["size"]} for g in groups)
    report = audit_directory(out)
    assert report.ok, report.table()


def test_a_new_value_that_sorts_first_keeps_histories_aligned(tmp_path: Path) -> None:
    # release 2 brings 'asthma', which sorts before every value the store already knows, so
    # the release's local codes and the store's global ids are in different orders; the audit
    # recomputes every breach from the files and compares it with the manifest's
    people = [f"o{i}" for i in range(8)]
    first = ["chlamydia", "flu", "fever", "cold", "flu", "fever", "cold", "flu"]
    second = ["asthma", "chlamydia", "flu", "fever", "cold", "asthma", "flu", "cold"]
    for name, values in (("t1", first), ("t2", second)):
        rows = "".join(
            f"{p},M,{65000 + i},{v}\n" for i, (p, v) in enumerate(zip(people, values, strict=True))
        )
        (tmp_path / f"{name}.csv").write_text("id,sex,zipcode,disease\n" + rows)
    (tmp_path / "c.toml").write_text(
        '[schema]\nid = "id"\nsensitive = "disease"\nqid = ["sex", "zipcode"]\n'
        '[privacy]\nl = 2\nk_prime = 2\nprotected = ["chlamydia"]\n[output]\nqueries = 20\n'
    )
    out = tmp_path / "out"
    args = ["anonymize", "--config", str(tmp_path / "c.toml"), "--out", str(out)]
    assert main([*args, str(tmp_path / "t1.csv"), str(tmp_path / "t2.csv")]) == 0
    report = audit_directory(out)
    assert report.ok, report.table()
    assert report.releases[1].breach_max > report.releases[0].breach_max > 0

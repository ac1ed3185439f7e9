"""Screenshots of the PR comment and the HTML report (issue #27), taken by headless Chromium from a real
`gpuemu-ci run` of examples/buggy, so the pictures in the documentation are what the renderers produce.

The comment goes through GitHub's own Markdown parser (cmark-gfm) into a page with GitHub-like CSS; the
report is the HTML file as written. Each test checks that Chromium wrote a real, non-blank PNG of the size
asked for, decoded here with zlib. Refresh the committed pictures in docs/img/ with

    GPUEMU_UPDATE_SCREENSHOTS=1 python3 -m pytest tests/render/test_screenshots.py

Without Chromium the tests are skipped, saying so (`.ci/run` installs Debian's chromium)."""

from __future__ import annotations

import base64
import html as html_module
import json
import os
import re
import shutil
import struct
import subprocess
import zlib
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pytest

from gpuemu_ci.render.html import render_html
from gpuemu_ci.render.links import Links
from gpuemu_ci.render.markdown import render_comment
from gpuemu_ci.results.model import Results
from tests.support_real_runs import real_run, real_run_dir

CHROMIUM = next((found for name in ("chromium", "chromium-browser") if (found := shutil.which(name))), None)
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="no Chromium here: to run these, apt-get install chromium (.ci/run does)"
)

DOCS_IMG = Path(__file__).resolve().parents[2] / "docs" / "img"
UPDATE = os.environ.get("GPUEMU_UPDATE_SCREENSHOTS") == "1"
SIZE_LIMIT = 300_000  # bytes of a committed picture
# Where the Action's comment links to; a local run has no workflow run, the pictures show what CI shows.
LINKS = Links(
    run_url="https://github.com/you/kernels/actions/runs/1",
    artifact_url="https://github.com/you/kernels/actions/runs/1/artifacts/1",
)

# A comment as github.com lays it out: the comment box and its header, the markdown-body rules that matter
# for what the templates emit (headings, tables, code, <details>, <sub>, alerts).
GITHUB_CSS = """
body { margin: 0; padding: 16px; background: #fff; color: #1f2328;
  font: 14px/1.5 -apple-system, "Segoe UI", "Noto Sans", Helvetica, "Liberation Sans", Arial, sans-serif; }
.comment { border: 1px solid #d1d9e0; border-radius: 6px; max-width: 860px; }
.comment-header { background: #f6f8fa; border-bottom: 1px solid #d1d9e0; border-radius: 6px 6px 0 0;
  padding: 8px 16px; color: #59636e; }
.comment-header strong { color: #1f2328; }
.bot { border: 1px solid #d1d9e0; border-radius: 2em; padding: 0 7px; font-size: 12px; margin-left: 4px; }
.markdown-body { padding: 16px; }
.markdown-body > :first-child { margin-top: 0; }
.markdown-body > :last-child { margin-bottom: 0; }
h2, h3, h4 { font-weight: 600; line-height: 1.25; margin: 24px 0 16px; }
h2 { font-size: 1.5em; padding-bottom: .3em; border-bottom: 1px solid #d1d9e0; }
h3 { font-size: 1.25em; }
h4 { font-size: 1em; }
p, ul, table, pre, details, .markdown-alert { margin: 0 0 16px; }
ul { padding-left: 2em; }
a { color: #0969da; text-decoration: none; }
sub { font-size: 75%; }
code, pre { font-family: ui-monospace, SFMono-Regular, Menlo, "Liberation Mono", "DejaVu Sans Mono", monospace;
  font-size: 85%; }
code { background: rgba(129, 139, 151, .15); border-radius: 6px; padding: .2em .4em; }
pre { background: #f6f8fa; border-radius: 6px; padding: 16px; overflow: auto; line-height: 1.45; }
pre code { background: none; padding: 0; font-size: 100%; }
table { border-collapse: collapse; border-spacing: 0; display: block; width: max-content; max-width: 100%;
  overflow: auto; }
th { font-weight: 600; }
th, td { padding: 6px 13px; border: 1px solid #d1d9e0; }
tr { border-top: 1px solid #d1d9e0; }
tr:nth-child(2n) { background: #f6f8fa; }
summary { cursor: pointer; }
.markdown-alert { padding: 8px 16px; border-left: .25em solid #0969da; }
.markdown-alert > :last-child { margin-bottom: 0; }
.markdown-alert-title { color: #0969da; font-weight: 500; margin-bottom: 4px; }
.markdown-alert-warning { border-left-color: #9a6700; }
.markdown-alert-warning .markdown-alert-title { color: #9a6700; }
.markdown-alert-caution { border-left-color: #d1242f; }
.markdown-alert-caution .markdown-alert-title { color: #d1242f; }
"""

# Runs after layout; --dump-dom prints what it leaves in an attribute.
MEASURE = """<script>
document.body.setAttribute("data-measured", JSON.stringify({
  height: Math.ceil(document.documentElement.scrollHeight),
  overflow: document.documentElement.scrollWidth - document.documentElement.clientWidth,
  headings: [...document.querySelectorAll("h1, h2, h3")].map(h => h.textContent.trim()),
  tables: document.querySelectorAll("table").length,
  // where a picture can end without cutting through a line or leaving a heading alone: below a block
  ends: [...document.querySelectorAll(":is(body, .markdown-body) > :not(h1, h2, h3, h4, script)")]
      .map(e => Math.ceil(e.getBoundingClientRect().bottom + window.scrollY)),
}));
</script>"""


def github_alerts(rendered: str) -> str:
    """cmark-gfm leaves GitHub's `> [!NOTE]` alerts as block quotes; github.com draws them as alert boxes."""
    pattern = r"<blockquote>\s*<p>\[!(NOTE|TIP|IMPORTANT|WARNING|CAUTION)\]\s*(.*?)</blockquote>"

    def box(found: re.Match[str]) -> str:
        kind = found.group(1).lower()
        return (
            f'<div class="markdown-alert markdown-alert-{kind}"><p class="markdown-alert-title">'
            f"{kind.capitalize()}</p><p>{found.group(2)}</div>"
        )

    return re.sub(pattern, box, rendered, flags=re.DOTALL)


def comment_page(markdown: str) -> str:
    """The comment as a pull request shows it: GitHub's parser, GitHub's look, in a comment box."""
    cmarkgfm = pytest.importorskip("cmarkgfm")
    from cmarkgfm.cmark import Options

    body = github_alerts(
        cmarkgfm.github_flavored_markdown_to_html(markdown, options=Options.CMARK_OPT_UNSAFE)
    )
    return (
        '<!DOCTYPE html><html><head><meta charset="utf-8"><style>' + GITHUB_CSS + "</style></head><body>"
        '<div class="comment"><div class="comment-header"><strong>github-actions</strong>'
        '<span class="bot">bot</span> commented</div><div class="markdown-body">'
        + body
        + "</div></div></body></html>"
    )


def chromium(where: Path, *arguments: str) -> subprocess.CompletedProcess[str]:
    assert CHROMIUM is not None
    profile = where / "profile"  # a fresh profile each time: nothing from another run leaks in
    return subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run",
         "--hide-scrollbars", "--force-device-scale-factor=1", f"--user-data-dir={profile}", *arguments],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def measure(page: str, where: Path, width: int) -> dict[str, Any]:
    """The laid-out page's height, horizontal overflow, headings, table count and block ends at `width` CSS
    pixels."""
    unlocked = re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", page)  # MEASURE is a script
    path = where / "measure.html"
    path.write_text(unlocked.replace("</body>", MEASURE + "</body>"), encoding="utf-8")
    done = chromium(
        where, f"--window-size={width},800", "--virtual-time-budget=5000", "--dump-dom", path.as_uri()
    )
    found = re.search(r'data-measured="([^"]*)"', done.stdout)
    assert found, done.stderr[-2000:]
    measured: dict[str, Any] = json.loads(html_module.unescape(found.group(1)))
    return measured


def screenshot(page: str, where: Path, width: int, height: int) -> bytes:
    """A PNG of the top `height` CSS pixels of `page` laid out `width` pixels wide."""
    path = where / "page.html"
    path.write_text(page, encoding="utf-8")
    shot = where / "shot.png"
    done = chromium(where, f"--window-size={width},{height}", f"--screenshot={shot}", path.as_uri())
    assert shot.exists(), done.stderr[-2000:]
    return shot.read_bytes()


def png_pixels(data: bytes) -> np.ndarray:
    """The pixels of an 8-bit RGB or RGBA, non-interlaced PNG as a (height, width, channels) array."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    chunks: dict[bytes, list[bytes]] = {}
    at = 8
    while at < len(data):
        (length,) = struct.unpack(">I", data[at : at + 4])
        kind, body = data[at + 4 : at + 8], data[at + 8 : at + 8 + length]
        (crc,) = struct.unpack(">I", data[at + 8 + length : at + 12 + length])
        assert zlib.crc32(kind + body) == crc, f"bad CRC in {kind!r}"
        chunks.setdefault(kind, []).append(body)
        at += 12 + length
    assert b"IEND" in chunks, "truncated PNG"
    width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", chunks[b"IHDR"][0])
    assert depth == 8 and colour in (2, 6) and interlace == 0, (depth, colour, interlace)
    channels = 3 if colour == 2 else 4
    raw = zlib.decompress(b"".join(chunks[b"IDAT"]))
    stride = width * channels
    assert len(raw) == height * (stride + 1), "IDAT holds the wrong number of bytes"
    rows = np.frombuffer(raw, dtype=np.uint8).reshape(height, stride + 1)
    pixels = np.zeros((height, stride), dtype=np.uint8)
    previous = np.zeros(stride, dtype=np.int32)
    for y in range(height):
        filter_type, line = int(rows[y, 0]), rows[y, 1:].astype(np.int32)
        if filter_type == 0:
            out = line
        elif filter_type == 2:
            out = (line + previous) & 0xFF
        elif (
            filter_type == 1
        ):  # each byte adds the same channel of the pixel to its left: a running sum per channel
            out = np.cumsum(line.reshape(width, channels), axis=0).reshape(stride) & 0xFF
        else:  # average and Paeth depend on the byte just decoded: byte by byte
            out = _unfilter_serial(filter_type, line.tolist(), previous.tolist(), channels)
        pixels[y] = out
        previous = np.asarray(out, dtype=np.int32)
    return pixels.reshape(height, width, channels)


def _unfilter_serial(kind: int, line: list[int], above: list[int], channels: int) -> np.ndarray:
    out = [0] * len(line)
    for i, value in enumerate(line):
        left = out[i - channels] if i >= channels else 0
        up = above[i]
        if kind == 3:
            out[i] = (value + (left + up) // 2) & 0xFF
            continue
        assert kind == 4, f"unknown PNG filter {kind}"
        corner = above[i - channels] if i >= channels else 0
        guess = left + up - corner
        near_left, near_up, near_corner = abs(guess - left), abs(guess - up), abs(guess - corner)
        if near_left <= near_up and near_left <= near_corner:
            out[i] = (value + left) & 0xFF
        elif near_up <= near_corner:
            out[i] = (value + up) & 0xFF
        else:
            out[i] = (value + corner) & 0xFF
    return np.asarray(out, dtype=np.int32)


def crop_height(measured: dict[str, Any], limit: int) -> int:
    """The whole page if it fits in `limit` pixels, else down to the end of the last block that fits."""
    if measured["height"] <= limit:
        return int(measured["height"])
    return int(max(end for end in measured["ends"] if end <= limit - 16)) + 16


def check_picture(data: bytes, width: int, height: int) -> None:
    """A real picture of a page: the size asked for, many colours (text, not a blank or one-colour window),
    and content from top to bottom (the crop does not cut into empty space)."""
    pixels = png_pixels(data)
    assert pixels.shape[:2] == (height, width)
    rgb = pixels[..., :3].reshape(-1, 3)
    assert len(np.unique(rgb, axis=0)) > 50, "the screenshot is (nearly) one colour"
    background = pixels[0, 0, :3]
    inked = np.flatnonzero((pixels[..., :3] != background).any(axis=2).any(axis=1))
    assert inked.size > height // 4, "hardly any line of the screenshot has content"
    assert inked[-1] > height * 0.9, "the bottom tenth of the screenshot is empty"
    assert len(data) < SIZE_LIMIT, f"{len(data)} bytes: too large to commit"


def keep(data: bytes, name: str) -> None:
    if UPDATE:
        DOCS_IMG.mkdir(parents=True, exist_ok=True)
        (DOCS_IMG / name).write_bytes(data)


def report_of(tmp_path_factory: pytest.TempPathFactory) -> Results:
    document = real_run(tmp_path_factory.getbasetemp(), "failing")
    assert any(op["status"] == "failed" for op in document["ops"])  # the picture shows a failure
    return msgspec.convert(document, type=Results, strict=False)


@pytest.mark.slow
def test_a_screenshot_of_the_pr_comment_as_github_shows_it(tmp_path_factory: pytest.TempPathFactory) -> None:
    page = comment_page(render_comment(report_of(tmp_path_factory), LINKS))
    where = tmp_path_factory.mktemp("comment-shot")
    width = 900
    measured = measure(page, where, width)
    assert measured["headings"][0].startswith("❌ gpuemu-ci FAILED")
    assert measured["tables"] >= 2 and measured["overflow"] <= 0
    height = crop_height(measured, 2400)
    data = screenshot(page, where, width, height)
    check_picture(data, width, height)
    keep(data, "pr-comment.png")


@pytest.mark.slow
def test_a_screenshot_of_the_html_report(tmp_path_factory: pytest.TempPathFactory) -> None:
    # With the error maps beside results.json: the first failing case's map is in the picture.
    results_dir = real_run_dir(tmp_path_factory.getbasetemp(), "failing")
    page = render_html(report_of(tmp_path_factory), LINKS, results_dir)
    where = tmp_path_factory.mktemp("report-shot")
    width = 900
    measured = measure(page, where, width)
    assert measured["headings"][0].startswith("gpuemu-ci FAILED")
    assert measured["tables"] >= 2 and measured["overflow"] <= 0
    height = crop_height(measured, 1700)  # the verdict, the failures, the passes; what follows is cut
    data = screenshot(page, where, width, height)
    check_picture(data, width, height)
    # The map shows under the report's Content-Security-Policy (img-src data:): the red cells of the first
    # failing case's map (colours nothing else on the page has) are in the picture.
    report = report_of(tmp_path_factory)
    first = next(g.worst for g in report.failure_groups() if g.worst is not None)
    assert first.error_map is not None
    drawn = png_pixels((results_dir / first.error_map).read_bytes())[..., :3].reshape(-1, 3)
    red = {tuple(c) for c in np.unique(drawn, axis=0) if c[0] > 150 and c[2] < 120 and c[1] < 150}
    shot = png_pixels(data)[..., :3].reshape(-1, 3)
    assert sum(tuple(c) in red for c in np.unique(shot, axis=0)) >= 1 and red
    keep(data, "html-report.png")


# Chromium's own decoding of a PNG, through a canvas: per row, the sum of R+G+B and a sum weighted by column
# and channel, so a wrong byte anywhere in a row shows.
DECODE = """<script>
const picture = new Image();
picture.onload = () => {
  const canvas = document.createElement("canvas");
  canvas.width = picture.width; canvas.height = picture.height;
  const context = canvas.getContext("2d");
  context.drawImage(picture, 0, 0);
  const data = context.getImageData(0, 0, canvas.width, canvas.height).data;
  const rows = [];
  for (let y = 0; y < canvas.height; y++) {
    let plain = 0, weighted = 0;
    for (let x = 0; x < canvas.width; x++) {
      const i = 4 * (y * canvas.width + x);
      plain += data[i] + data[i + 1] + data[i + 2];
      weighted += (x + 1) * (data[i] + 2 * data[i + 1] + 3 * data[i + 2]);
    }
    rows.push([plain, weighted]);
  }
  document.body.setAttribute("data-rows", JSON.stringify(rows));
};
picture.src = "data:image/png;base64,PNG";
</script>"""


def chromium_row_sums(data: bytes, where: Path) -> list[list[int]]:
    path = where / "decode.html"
    path.write_text(
        "<html><body>" + DECODE.replace("PNG", base64.b64encode(data).decode()) + "</body></html>"
    )
    done = chromium(where, "--window-size=300,200", "--virtual-time-budget=5000", "--dump-dom", path.as_uri())
    found = re.search(r'data-rows="([^"]*)"', done.stdout)
    assert found, done.stderr[-2000:]
    return list(json.loads(html_module.unescape(found.group(1))))


@pytest.mark.slow
def test_the_png_check_decodes_as_chromium_does_and_rejects_a_page_without_text(tmp_path: Path) -> None:
    """The checker itself: a screenshot with text, flat colour and gradients (so the encoder uses its several
    row filters) decodes to the pixels drawn and to what Chromium's own decoder reads; a blank page is
    refused."""
    page = (
        '<!DOCTYPE html><html><body style="margin:0;background:#fff;font:14px sans-serif">'
        '<div style="position:absolute;left:20px;top:10px;width:50px;height:40px;background:#f00"></div>'
        '<p style="position:absolute;left:90px;top:10px;margin:0;color:#c00">FAILED 3.05e+05× <code>x</code></p>'
        '<div style="position:absolute;left:0;top:80px;width:256px;height:20px;'
        'background:linear-gradient(to right,#000,#fff)"></div>'
        '<div style="position:absolute;left:100px;top:120px;width:180px;height:60px;'
        'background:linear-gradient(135deg,#f00,#0c0,#00f)"></div></body></html>'
    )
    data = screenshot(page, tmp_path, 300, 200)  # Chromium paints only part of a window under ~150 px tall
    pixels = png_pixels(data)[..., :3].astype(np.int64)
    assert pixels.shape == (200, 300, 3)
    assert (pixels[10:50, 20:70] == [255, 0, 0]).all()
    assert (pixels[60:75] == 255).all() and (pixels[105:115] == 255).all()
    ramp = pixels[90, :256, 0]
    assert ramp[0] < 8 and ramp[-1] > 247 and (np.diff(ramp) >= 0).all()
    columns = np.arange(1, 301)
    ours = [
        [int(row.sum()), int(((row[:, 0] + 2 * row[:, 1] + 3 * row[:, 2]) * columns).sum())] for row in pixels
    ]
    assert ours == chromium_row_sums(data, tmp_path)
    with pytest.raises(AssertionError, match="one colour"):
        check_picture(screenshot("<html><body></body></html>", tmp_path, 300, 200), 300, 200)

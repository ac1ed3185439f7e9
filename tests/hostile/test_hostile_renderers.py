"""Renderers against what an op can put in its own failure message (issue #14, items 9 and 15): lone surrogates,
forged workflow commands, GitHub's autolinks (GH-123, #5, @user, URLs), Markdown and HTML. Through the real
Action entrypoint against the loopback API, and the comment as GitHub renders it (cmarkgfm, GitHub's parser).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from gpuemu_ci.render.escape import markdown_text
from tests.action.support_runner import (
    TINY_CONFIG,
    pull_request_event,
    run_step,
    runner_env,
    write_tiny_project,
)
from tests.github.support_fake_api import FakeGitHub
from tests.support_cli import run_cli

cmarkgfm = pytest.importorskip("cmarkgfm")
HEAD, BASE, MERGE = "4" * 40, "5" * 40, "6" * 40

HOSTILE_MESSAGE = (
    "fixes GH-123 and gh-9 for @octocat in #5, see https://evil.example/x and www.evil.example; "
    "<img src=x onerror=alert(1)> **bold** [link](https://evil.example) | cell \ud800 \udcff \udfff end"
)
HOSTILE_OPS = f"""\
import numpy as np

def scale(x):
    print("::error file=gpuemu.toml,line=1::forged by the op")
    print("::add-mask::nothing")
    raise ValueError({HOSTILE_MESSAGE!r})

def scale_ref(x):
    return x * 2.0

def rowsum(x):
    return x.astype(np.float32).sum(axis=-1).astype(x.dtype)

def rowsum_ref(x):
    return x.sum(axis=-1)
"""


@pytest.mark.slow
def test_an_ops_hostile_message_is_published_inert_everywhere(
    fake_github: FakeGitHub, tmp_path: Path
) -> None:
    workspace = write_tiny_project(tmp_path / "ws", HOSTILE_OPS, TINY_CONFIG)
    pr = fake_github.add_pull(head_sha=HEAD, base_sha=BASE)
    event = pull_request_event(fake_github, pr, head_sha=HEAD, base_sha=BASE)
    env = runner_env(fake_github, workspace, "pull_request", event, sha=MERGE, ref=f"refs/pull/{pr}/merge",
                     inputs={"mode": "gate", "baseline": "none"})  # fmt: skip
    step = run_step(env)
    assert step.returncode == 1, step.describe()  # the op failed; nothing crashed on the way
    assert "Traceback" not in step.stderr and "internal error" not in step.stdout
    document = json.loads((workspace / "gpuemu-out" / "results.json").read_text(encoding="utf-8"))
    message = document["ops"][0]["failures"][0]["message"]
    assert "\ufffd" in message and not re.search("[\ud800-\udfff]", message)
    # Every published output exists and is valid UTF-8.
    for name in ("results.sarif", "junit.xml", "report.dsse.json"):
        (workspace / "gpuemu-out" / name).read_bytes().decode("utf-8")
    assert not [c for c in step.commands if c.message == "forged by the op"]  # the op's print is no command
    (comment,) = fake_github.comments(pr)
    html = cmarkgfm.github_flavored_markdown_to_html(
        comment["body"], options=cmarkgfm.Options.CMARK_OPT_UNSAFE
    )
    links = re.findall(r'href="([^"]*)"', html)
    assert all(link.startswith("https://github.com/octo-org/kernels/actions/runs/") for link in links), links
    assert "<img" not in html and "<strong>bold" not in html
    text = re.sub("<[^>]+>", "", html)
    # GitHub links these in the rendered text; a zero-width joiner after the sigil or prefix stops it. URLs are
    # linked while parsing, so the hrefs above already show that none of them became a link.
    for live in ("GH-123", "gh-9", "@octocat", "#5"):
        assert live not in text, live
    for fmt in ("comment", "summary", "sarif", "junit", "html", "annotations"):
        result = run_cli(["render", fmt, workspace / "gpuemu-out" / "results.json"])
        assert result.code == 0, result.output


@pytest.mark.parametrize("reference", ["GH-1", "gh-42", "Gh-7", "(GH-123)", "xGH-1"])
def test_gh_references_do_not_survive_escaping(reference: str) -> None:
    shown = markdown_text(reference)
    assert not re.search(r"(?i)\bgh-\d", shown)
    assert shown.replace("\u200d", "").replace("\\(", "(") == reference

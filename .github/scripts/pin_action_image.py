"""Point action.yml at a published image by digest: `image: Dockerfile` -> `image: docker://REF@sha256:...`.

Run by .github/workflows/release.yml after it pushed the image, on the commit that the release tags then
point at; a job that uses the release pulls that exact image instead of building one.

    python .github/scripts/pin_action_image.py ghcr.io/owner/gpuemu-ci@sha256:<64 hex> [action.yml]
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

PINNED = re.compile(r"^[a-z0-9][a-z0-9./_-]*@sha256:[0-9a-f]{64}$")
IMAGE_LINE = re.compile(r"^(  image: ).*$", re.MULTILINE)


def pin(action_yml: Path, reference: str) -> None:
    if not PINNED.fullmatch(reference):
        raise SystemExit(f"not an image reference pinned by digest: {reference!r}")
    text = action_yml.read_text(encoding="utf-8")
    updated, count = IMAGE_LINE.subn(lambda m: f"{m.group(1)}docker://{reference}", text)
    if count != 1:
        raise SystemExit(f"{action_yml} has {count} `image:` lines under runs; expected exactly one")
    action_yml.write_text(updated, encoding="utf-8")


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3):
        raise SystemExit(__doc__)
    pin(Path(sys.argv[2] if len(sys.argv) == 3 else "action.yml"), sys.argv[1])

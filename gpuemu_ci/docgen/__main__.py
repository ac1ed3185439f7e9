"""`python3 -m gpuemu_ci.docgen [--check] [--repo DIR]`: regenerate the generated documentation regions.

Exit 0: current (or rewritten); 1: `--check` found stale pages; 2: not run from a checkout of this repository."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gpuemu_ci.docgen.pages import PAGES, REGENERATE, stale_pages


def main(argv: list[str] | None = None) -> int:
    """`python3 -m gpuemu_ci.docgen [--check] [--repo DIR]`: rewrites the generated pages (or, with --check,
    lists the stale ones and exits 1); exit 2 outside a checkout."""
    parser = argparse.ArgumentParser(prog="python3 -m gpuemu_ci.docgen", description=__doc__)
    parser.add_argument(
        "--check", action="store_true", help="only report stale pages (exit 1), write nothing"
    )
    parser.add_argument("--repo", type=Path, default=Path.cwd(), help="repository root (default: here)")
    args = parser.parse_args(argv)
    missing = [p for p in (*PAGES, "action.yml") if not (args.repo / p).is_file()]
    if missing:
        print(
            f"docgen: error: {args.repo} is not a gpuemu-ci checkout (missing {', '.join(missing)})",
            file=sys.stderr,
        )
        return 2
    try:
        stale = stale_pages(args.repo, write=not args.check)
    except ValueError as exc:
        print(f"docgen: error: {exc}", file=sys.stderr)
        return 2
    for page in stale:
        print(f"{'stale' if args.check else 'rewrote'}: {page}")
    if args.check and stale:
        print(f"regenerate with: {REGENERATE}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

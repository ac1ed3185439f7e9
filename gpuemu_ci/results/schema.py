"""The JSON Schema of results.json, generated from the model (`results.model.Results`), never kept by hand.

The published copy ships inside the package (``gpuemu_ci/schemas/results.schema.json``, JSON Schema draft
2020-12) for people's own scripts; a test keeps it equal to what the model generates. Regenerate it with

    python -m gpuemu_ci.results.schema --write

gpuemu-ci itself validates documents with the model (`results.codec.from_json`), not with this schema.
"""

from __future__ import annotations

import argparse
import inspect
import json
import sys
from importlib import resources
from pathlib import Path
from typing import Any

import msgspec

from gpuemu_ci.results.model import SCHEMA_VERSION, Results

SCHEMA_RESOURCE = "results.schema.json"
SCHEMA_ID = f"https://gpuemu.dev/schemas/results/v{SCHEMA_VERSION}.json"


def generate_schema() -> dict[str, Any]:
    """The schema of the current model."""
    schema: dict[str, Any] = _independent_of_msgspec(msgspec.json.schema(Results))
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": f"gpuemu-ci results document (schema version {SCHEMA_VERSION})",
        **schema,
    }


def _independent_of_msgspec(node: Any) -> Any:
    """The schema as every msgspec release we accept writes it: descriptions are the docstrings cleaned as
    `inspect.cleandoc` cleans them (0.23 dedents them, 0.22 does not), and no `propertyNames` (0.23 adds it for
    dicts keyed by an enum; the keys are described in the description)."""
    if isinstance(node, dict):
        return {
            key: inspect.cleandoc(value)
            if key == "description" and isinstance(value, str)
            else _independent_of_msgspec(value)
            for key, value in node.items()
            if key != "propertyNames"
        }
    if isinstance(node, list):
        return [_independent_of_msgspec(item) for item in node]
    return node


def schema_text() -> str:
    """The schema as the published file holds it."""
    return json.dumps(generate_schema(), indent=2, sort_keys=True) + "\n"


def published_schema_text() -> str:
    """The copy shipped in the package."""
    return resources.files("gpuemu_ci").joinpath("schemas", SCHEMA_RESOURCE).read_text(encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    """`python -m gpuemu_ci.results.schema`: print the JSON Schema, or rewrite the packaged copy (--write)."""
    parser = argparse.ArgumentParser(description="Print (or --write) the results.json JSON Schema.")
    parser.add_argument("--write", action="store_true", help="Rewrite the copy shipped in the package.")
    args = parser.parse_args(argv)
    if args.write:
        target = Path(__file__).resolve().parent.parent / "schemas" / SCHEMA_RESOURCE
        target.write_text(schema_text(), encoding="utf-8")
        print(f"wrote {target}", file=sys.stderr)
    else:
        sys.stdout.write(schema_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Fixtures shared by the renderer tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

SARIF_SCHEMA = Path(__file__).resolve().parents[1] / "fixtures" / "sarif" / "sarif-schema-2.1.0.json"


@pytest.fixture(scope="module")
def sarif_validator() -> Any:
    """A validator of the SARIF 2.1.0 JSON schema (tests/fixtures/sarif/)."""
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads(SARIF_SCHEMA.read_text(encoding="utf-8"))
    jsonschema.Draft4Validator.check_schema(schema)
    return jsonschema.Draft4Validator(schema)

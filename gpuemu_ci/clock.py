"""Timestamps as every document of gpuemu-ci writes them: RFC 3339, UTC, second precision."""

from __future__ import annotations

from datetime import UTC, datetime


def format_utc(moment: datetime) -> str:
    """e.g. 2026-11-22T10:00:00Z."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def utc_now() -> str:
    """The current time, formatted."""
    return format_utc(datetime.now(UTC))

"""User errors: one clear message, exit code 2, no traceback."""

from __future__ import annotations

import difflib
import sys
from collections.abc import Iterable

EXIT_USER_ERROR = 2


class UserError(Exception):
    """A mistake in the user's input (config, flag, file, data): reported without a traceback."""


def close_matches(name: str, candidates: Iterable[str], n: int = 3) -> list[str]:
    """Names among ``candidates`` that look like ``name`` (case-insensitive), best first."""
    candidates = list(candidates)
    lowered = {c.lower(): c for c in candidates}
    found = difflib.get_close_matches(name.lower(), list(lowered), n=n, cutoff=0.6)
    return [lowered[f] for f in found]


def did_you_mean(name: str, candidates: Iterable[str]) -> str:
    """`` Did you mean: a, b?`` or an empty string."""
    found = close_matches(name, candidates)
    return f" Did you mean: {', '.join(found)}?" if found else ""


def report_user_error(err: BaseException) -> int:
    """Print ``err`` as one ``error:`` message on stderr and return the user-error exit code."""
    print(f"error: {err}", file=sys.stderr)
    return EXIT_USER_ERROR

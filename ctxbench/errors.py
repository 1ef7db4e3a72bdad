"""One error type for mistakes a user can fix; the CLI prints it as one line and exits 2."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class UserError(Exception):
    """Bad input: says what is wrong and how to fix it.

    The CLI turns it into ``error: <what> — <fix>`` and exit code 2. Anything else is a bug
    and keeps its traceback.
    """

    def __init__(self, what: str, fix: str = "") -> None:
        super().__init__(f"{what} — {fix}" if fix else what)
        self.what = what
        self.fix = fix

    def line(self) -> str:
        return f"error: {self.what} — {self.fix}" if self.fix else f"error: {self.what}"


def closest(name: str, choices: Iterable[str]) -> str | None:
    """The closest valid name to ``name``, for "did you mean" messages."""
    matches = difflib.get_close_matches(name, list(choices), n=1, cutoff=0.5)
    return matches[0] if matches else None


def unknown(kind: str, name: str, choices: Iterable[str]) -> UserError:
    """``unknown method 'ntkk' — did you mean 'ntk'? (choices: ...)``"""
    choices = sorted(choices)
    guess = closest(name, choices)
    hint = f"did you mean '{guess}'? " if guess else ""
    return UserError(f"unknown {kind} '{name}'", f"{hint}choose one of: {', '.join(choices)}")

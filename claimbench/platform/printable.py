"""Text from a file or a caller made safe to print on a terminal.

A field that holds ESC, CR or another control character can move the cursor, erase lines or
hide text, so a printed log line could show a call that never happened. ``printable`` escapes
every non-printable character (``\\x1b``, ``\\r``, ``\\u200b``) the way Python's repr does.
"""

from __future__ import annotations


def printable(text: str) -> str:
    """``text`` with every non-printable character (controls, format characters, separators
    other than the space) replaced by its backslash escape."""
    if text.isprintable():
        return text
    return "".join(
        c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text
    )

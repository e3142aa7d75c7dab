"""The arguments of a ``stream-release`` command line as a page shows it (an example at the foot
of a help page, a line of a documentation page's shell block)."""

from __future__ import annotations

import shlex

SHELL = ("&&", "||", "|", ">", ";", "&")
"""Where the command line ends and the shell goes on."""


def command_arguments(line: str) -> list[str] | None:
    """The arguments after ``stream-release`` in ``line`` (a variable set before it, a command
    piped into it and what a shell operator starts left out); ``None`` without the command."""
    words = shlex.split(line, comments=True)
    if "stream-release" not in words:
        return None
    words = words[words.index("stream-release") + 1 :]
    cut = next((i for i, w in enumerate(words) if w in SHELL), len(words))
    return words[:cut]

"""What the project's argparse commands (``scripts/``, ``bench/``) share: a one-line error and the Ctrl-C exit code.

Why a module of its own: a script's command line must load before anything heavy (``scripts.compare`` guards its
imports against a Ctrl-C and needs the exit code to do so), so this leaf imports only the standard library.
"""

from __future__ import annotations

import argparse
from typing import NoReturn

#: The exit code of a Ctrl-C, as a shell reports a command a SIGINT ended (128 + 2).
INTERRUPTED = 130


class OneLineParser(argparse.ArgumentParser):
    """argparse with a one-line error and exit code 2: argparse's default prints the whole usage first, which
    buries the line naming the bad argument."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"error: {message} (see {self.prog} --help)\n")

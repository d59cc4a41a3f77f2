"""The ``mercer`` command (``mercer demo | fit | evaluate | tune | predict``); see ``mercer --help``."""

from ._main import COMMANDS, Command, build_parser, console_main, main

__all__ = ["COMMANDS", "Command", "build_parser", "console_main", "main"]

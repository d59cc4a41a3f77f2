"""The ``mercer`` command (``mercer demo | fit | predict``); see ``mercer --help``."""

from ._main import build_parser, main

__all__ = ["build_parser", "main"]

"""ft-serve: the `ft` command line (and, later, the HTTP server agents talk to)."""

__version__ = "0.1.0"

"""The one error type: a message for the user, printed without a traceback, and an exit status."""


class AgentsError(Exception):
    """Something the user can fix (a missing harness, no server, a bad flag); ``str(e)`` says how."""

    exit_code = 2

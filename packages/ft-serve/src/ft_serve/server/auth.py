"""Key checks shared by the API and admin endpoints: ``Authorization: Bearer KEY`` or
``x-api-key: KEY``; where ``ft serve`` finds its keys (a flag, a file, an environment variable)."""

from __future__ import annotations

import hmac
import sys
from pathlib import Path

from ft_core import env as ft_env
from ft_core.errors import FTError

from ft_serve.server.errors import ApiError


def require_key(request, keys: list[str], what: str) -> None:
    """Raise 401 unless the request presents one of ``keys`` (compared in constant time)."""
    got = request.headers.get("x-api-key") or ""
    auth = request.headers.get("authorization") or ""
    if auth.lower().startswith("bearer "):
        got = got or auth[7:].strip()
    if not got:
        raise ApiError(401, f"missing {what}: send 'Authorization: Bearer KEY' or 'x-api-key: KEY'")
    if not any(hmac.compare_digest(got.encode(), k.encode()) for k in keys):
        raise ApiError(401, f"invalid {what}")


def load_key(value: str | None, path: str | None, env: str, flag: str) -> str | None:
    """The key from ``flag`` (``value``), else the file ``path`` (``flag``-file: its text without
    surrounding whitespace), else ``$env``; None when none is set. A file or the environment keeps
    the key out of ``ps``; a key given as ``flag`` gets a note saying so."""
    if value and path:
        raise FTError(f"give {flag} or {flag}-file, not both")
    if value:
        print(
            f"ft serve: note: {flag} on the command line is visible to other users (ps); "
            f"prefer {flag}-file PATH or ${env}",
            file=sys.stderr,
        )
        return value
    if path:
        try:
            key = Path(path).read_text().strip()
        except (OSError, UnicodeDecodeError) as e:
            raise FTError(f"{flag}-file {path}: cannot read it ({e})") from None
        if not key or "\n" in key:
            raise FTError(
                f"{flag}-file {path}: expected the key on one line, found "
                f"{'nothing' if not key else 'several lines'}"
            )
        return key
    return ft_env.text(env)

"""The key id of the server secret, carried in every token this server signs (thinking-block
signatures, Responses ``encrypted_content``). It tells a token apart as ours (verify it: one
that does not verify was altered -> 400) or foreign (another server's, a cloud model's, a former
secret's: the blob is dropped and the item's plain text, if any, kept as history; counted in
``ft_foreign_reasoning_total``).

Tokens. ``encrypted_content`` is ``ft2.<key id>.<base64 JSON {"k": kind, "t": text}>.<base64
HMAC-SHA256>`` keyed by the server secret (``key_id`` below): opaque to clients, verifiable
here, not secret (it is signed, not encrypted). Kinds: "reasoning" (a reasoning item's text),
"compaction" (a conversation summary). The ``ft1.<payload>.<mac>`` tokens of servers before key
ids still verify. A token this server cannot verify and that does not name its key id is foreign
(OpenAI's encrypted reasoning, another server's, a former secret's: a session moved here): a
reasoning item then gives its plain ``content`` or ``summary`` text instead, a compaction item is
dropped (its summary cannot be read), and each is counted (``ft_foreign_reasoning_total``). An ft
token under another key (another ft server's, a former secret's) still gives the text it carries:
its payload is readable, only not verifiable. A token that names this server's key id but does
not verify (altered), or is of the wrong kind, is a 400.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json

from ft_serve.server.errors import bad_request


def key_id(secret: bytes) -> str:
    """8 URL-safe base64 characters (no ``.``) naming ``secret``: a hash of it, which reveals
    nothing usable about it."""
    digest = hashlib.sha256(b"ft/key-id/v1\n" + secret).digest()
    return base64.urlsafe_b64encode(digest[:6]).decode()


# ---- signed tokens ----------------------------------------------------------------------------
def _b64(b: bytes) -> str:
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


def _unb64(s: str) -> bytes:
    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))


def _hmac(secret: bytes, msg: str) -> bytes:
    return hmac.new(secret, msg.encode(), hashlib.sha256).digest()


def seal(secret: bytes, kind: str, text: str) -> str:
    """An opaque token carrying ``text`` that only this server (its ``secret``) can verify."""
    payload = _b64(json.dumps({"k": kind, "t": text}, ensure_ascii=False).encode())
    head = f"ft2.{key_id(secret)}.{payload}"
    return f"{head}.{_b64(_hmac(secret, head))}"


def unseal(secret: bytes, token, kind: str, path: str) -> str | None:
    """The text inside a token from ``seal``, or None when the token is foreign (see the module
    docstring); 400 naming ``path`` when it is missing, not a string, altered or of another kind."""
    if not token:
        raise bad_request(f"'{path}' is required", path)
    if not isinstance(token, str):
        raise bad_request(f"'{path}' must be a string", path)
    parts = token.split(".")
    ours = len(parts) == 4 and parts[0] == "ft2" and parts[1] == key_id(secret)
    try:
        if ours:
            ok = hmac.compare_digest(_unb64(parts[3]), _hmac(secret, ".".join(parts[:3])))
        else:  # ft1: the tokens of servers before key ids, verified under this secret
            ok = (
                len(parts) == 3
                and parts[0] == "ft1"
                and hmac.compare_digest(_unb64(parts[2]), _hmac(secret, parts[1]))
            )
        data = json.loads(_unb64(parts[-2])) if ok else None
    except (ValueError, UnicodeError):
        data = None
    if data is None and not ours:
        return None
    if not isinstance(data, dict) or data.get("k") != kind or not isinstance(data.get("t"), str):
        raise bad_request(
            f"'{path}' names this server's key but was altered, or is not a {kind} "
            "token: send back the items exactly as this server returned them",
            path,
            "invalid_encrypted_content",
        )
    return data["t"]


def foreign_text(token: str, kind: str) -> str | None:
    """The text of another ft server's token of ``kind`` (its payload is readable, only not
    verifiable here), or None for a blob this server cannot read (OpenAI's, anything else)."""
    parts = token.split(".")
    if not ((len(parts) == 3 and parts[0] == "ft1") or (len(parts) == 4 and parts[0] == "ft2")):
        return None
    try:
        data = json.loads(_unb64(parts[-2]))
    except (ValueError, UnicodeError):
        return None
    ok = isinstance(data, dict) and data.get("k") == kind and isinstance(data.get("t"), str)
    return data["t"] if ok else None

"""The key id of the server secret, carried in every token this server signs (thinking-block
signatures, Responses ``encrypted_content``). It tells a token apart as ours (verify it: one
that does not verify was altered -> 400) or foreign (another server's, a cloud model's, a former
secret's: the blob is dropped and the item's plain text, if any, kept as history; counted in
``ft_foreign_reasoning_total``)."""

from __future__ import annotations

import base64
import hashlib


def key_id(secret: bytes) -> str:
    """8 URL-safe base64 characters (no ``.``) naming ``secret``: a hash of it, which reveals
    nothing usable about it."""
    digest = hashlib.sha256(b"ft/key-id/v1\n" + secret).digest()
    return base64.urlsafe_b64encode(digest[:6]).decode()

"""Lease tokens: 32 bytes, url-safe base64, only their SHA-256 stored (`ledger.tokens.hash_token`, SPEC §3).

A token is HMAC-SHA256(secret key, "lease:<task id>:<epoch>:<salt>") with a
random per-attempt salt. (task, epoch) names exactly one attempt, so the same
claim replayed under an idempotency key re-derives the same token, and no
plaintext token exists anywhere in the database.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets

from django.conf import settings

from ledger.tokens import hash_token


def derive_lease_token(*, task_id: int, epoch: int, salt: str, key: str | None = None) -> str:
    message = f"lease:{task_id}:{epoch}:{salt}".encode()
    digest = hmac.new((key or settings.SECRET_KEY).encode(), message, hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def rederive_lease_token(*, task_id: int, epoch: int, salt: str, token_hash: str) -> str | None:
    """The attempt's token again, if the current secret key or one of `SECRET_KEY_FALLBACKS` made it.

    The candidate is checked against the stored hash, so a replay never hands
    out a token the server would refuse; None when no key reproduces it (the
    key was rotated without keeping the old one as a fallback).
    """
    for key in (settings.SECRET_KEY, *settings.SECRET_KEY_FALLBACKS):
        token = derive_lease_token(task_id=task_id, epoch=epoch, salt=salt, key=key)
        if lease_token_matches(token, token_hash):
            return token
    return None


def new_lease_token(*, task_id: int, epoch: int) -> tuple[str, str, str]:
    """A fresh token for the attempt (task, epoch): returns (token, salt, token_hash)."""
    salt = secrets.token_hex(16)
    token = derive_lease_token(task_id=task_id, epoch=epoch, salt=salt)
    return token, salt, hash_token(token)


def lease_token_matches(token: str, token_hash: str) -> bool:
    return hmac.compare_digest(hash_token(token), token_hash)


# The command's credential (SPEC §23.2): `lha_<attempt id>_<random>`. The id lets the server find the one
# attempt it may be for by primary key; the random part (256 bits) is the secret, stored only as its SHA-256.
ATTEMPT_TOKEN_PREFIX = "lha_"  # noqa: S105 - a public prefix, not a secret
ATTEMPT_TOKEN_MAX_CHARS = 200
_ATTEMPT_ID_MAX_DIGITS = 18


def new_attempt_token(*, attempt_id: int) -> tuple[str, str]:
    """A fresh command credential for the attempt: returns (token, token_hash)."""
    token = f"{ATTEMPT_TOKEN_PREFIX}{attempt_id}_{secrets.token_urlsafe(32)}"
    return token, hash_token(token)


def attempt_id_of_token(token: str) -> int | None:
    """The attempt an attempt token names, or None when it is not shaped like one."""
    if not token.startswith(ATTEMPT_TOKEN_PREFIX) or len(token) > ATTEMPT_TOKEN_MAX_CHARS:
        return None
    digits, separator, secret = token[len(ATTEMPT_TOKEN_PREFIX) :].partition("_")
    if not separator or not secret or not digits.isascii() or not digits.isdigit():
        return None
    if len(digits) > _ATTEMPT_ID_MAX_DIGITS or digits.startswith("0"):
        return None
    return int(digits)

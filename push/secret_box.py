"""Webhook signing secrets at rest: encrypted with a key derived from the server's secret key.

A secret must be readable by the server (it signs every delivery with it),
so it cannot be hashed like a token; encrypted, it is unreadable from the
database file, a dump or a backup without `LEASEHOLD_SECRET_KEY`, which lives
apart from them (the environment, `var/secret_key`).

The key is derived from `SECRET_KEY` with Django's `salted_hmac` under a salt
of its own (a key used for nothing else), and the cipher is `cryptography`'s
Fernet (AES-128-CBC with HMAC-SHA256, authenticated). New values are written
with `SECRET_KEY`; values written with a key in `SECRET_KEY_FALLBACKS`
(`LEASEHOLD_SECRET_KEY_FALLBACKS`) still read, so the secret key can be
rotated: add the old key to the fallbacks, run `manage.py
reencrypt_webhook_secrets`, then drop it.
"""

from __future__ import annotations

import base64
import functools

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings
from django.utils.crypto import salted_hmac

KEY_SALT = "leasehold.push.webhook-secret"


class SecretUnreadable(ValueError):
    """The stored value was not written with SECRET_KEY nor with any of SECRET_KEY_FALLBACKS."""


@functools.lru_cache(maxsize=16)
def _fernet(secret_key: str) -> Fernet:
    digest = salted_hmac(KEY_SALT, "fernet", secret=secret_key, algorithm="sha256").digest()
    return Fernet(base64.urlsafe_b64encode(digest))


def _keys() -> MultiFernet:
    return MultiFernet([_fernet(key) for key in [settings.SECRET_KEY, *settings.SECRET_KEY_FALLBACKS]])


def encrypt(plaintext: str) -> str:
    """The value to store; '' stays '' (no secret is no secret)."""
    if not plaintext:
        return ""
    return _keys().encrypt(plaintext.encode()).decode("ascii")


def decrypt(stored: str) -> str:
    if not stored:
        return ""
    try:
        return _keys().decrypt(stored.encode("ascii")).decode()
    except (InvalidToken, UnicodeError):
        raise SecretUnreadable(
            "a webhook signing secret cannot be decrypted with LEASEHOLD_SECRET_KEY or any of "
            "LEASEHOLD_SECRET_KEY_FALLBACKS (was the key changed without keeping the old one as a fallback?); "
            "roll the endpoint's secret"
        ) from None


def reencrypt(stored: str) -> str:
    """The same secret, encrypted anew with the current SECRET_KEY (after a rotation)."""
    if not stored:
        return ""
    try:
        return _keys().rotate(stored.encode("ascii")).decode("ascii")
    except (InvalidToken, UnicodeError):
        raise SecretUnreadable("a webhook signing secret cannot be decrypted; roll the endpoint's secret") from None

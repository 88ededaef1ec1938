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


def derive_lease_token(*, task_id: int, epoch: int, salt: str) -> str:
    message = f"lease:{task_id}:{epoch}:{salt}".encode()
    digest = hmac.new(settings.SECRET_KEY.encode(), message, hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def new_lease_token(*, task_id: int, epoch: int) -> tuple[str, str, str]:
    """A fresh token for the attempt (task, epoch): returns (token, salt, token_hash)."""
    salt = secrets.token_hex(16)
    token = derive_lease_token(task_id=task_id, epoch=epoch, salt=salt)
    return token, salt, hash_token(token)


def lease_token_matches(token: str, token_hash: str) -> bool:
    return hmac.compare_digest(hash_token(token), token_hash)

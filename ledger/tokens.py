"""API tokens for agents: shown once, stored only as a SHA-256 hash."""

from __future__ import annotations

import hashlib
import secrets
from typing import Any

from django.db import models

AGENT_TOKEN_PREFIX = "lh_"  # noqa: S105 - a public prefix, not a secret


def new_agent_token() -> str:
    return AGENT_TOKEN_PREFIX + secrets.token_urlsafe(32)


def hash_token(token: str) -> str:
    """The stored form of every bearer secret (agent API tokens and lease tokens): its SHA-256, hex."""
    return hashlib.sha256(token.encode()).hexdigest()


def swap_active_token_hash(holder: models.Model, token: str) -> bool:
    """Store `token`'s hash on `holder` if it is still active (compare-and-set on `is_active`).

    The old token is refused from the same commit on. Refreshes `holder`; False when it was
    deactivated, so the caller refuses the rotation (a deactivated holder's tokens are refused anyway).
    """
    manager: Any = type(holder)._default_manager
    changed = manager.filter(pk=holder.pk, is_active=True).update(token_hash=hash_token(token))
    holder.refresh_from_db()
    return bool(changed)

"""API tokens for agents: shown once, stored only as a SHA-256 hash."""

from __future__ import annotations

import hashlib
import secrets

AGENT_TOKEN_PREFIX = "lh_"  # noqa: S105 - a public prefix, not a secret


def new_agent_token() -> str:
    return AGENT_TOKEN_PREFIX + secrets.token_urlsafe(32)


def hash_token(token: str) -> str:
    """The stored form of every bearer secret (agent API tokens and lease tokens): its SHA-256, hex."""
    return hashlib.sha256(token.encode()).hexdigest()

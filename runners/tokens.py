"""Runner tokens (SPEC §23.1): `lhr_<random>`, shown once, stored only as their SHA-256 (`ledger.tokens.hash_token`).

The prefix tells the API's authentication a runner token from an agent's (`lh_`) or an attempt's (`lha_`)
before any lookup; a runner token authenticates only the runner endpoints (`api.auth.RunnerPrincipal`).
"""

from __future__ import annotations

import secrets

RUNNER_TOKEN_PREFIX = "lhr_"  # noqa: S105 - a public prefix, not a secret


def new_runner_token() -> str:
    return RUNNER_TOKEN_PREFIX + secrets.token_urlsafe(32)

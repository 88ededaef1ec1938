"""Security settings, star-imported by `base`: HTTPS behind a TLS-terminating proxy, rate limits, lockout.

Driven by environment variables like the rest (`core.env`); a bad value
stops start-up with a message naming the variable.
"""

from __future__ import annotations

from datetime import timedelta

from django.core.exceptions import ImproperlyConfigured

from core.env import env_bool, env_int, env_list, env_str

# --- HTTPS, behind a TLS-terminating proxy (docs/operations.md, "Deploying") --

LEASEHOLD_HTTPS = env_bool("LEASEHOLD_HTTPS", False)
CSRF_TRUSTED_ORIGINS = env_list("LEASEHOLD_CSRF_TRUSTED_ORIGINS", [])
for _origin in CSRF_TRUSTED_ORIGINS:
    if not _origin.startswith(("https://", "http://")):
        raise ImproperlyConfigured(
            f"LEASEHOLD_CSRF_TRUSTED_ORIGINS entries start with https:// (or http://); got {_origin!r}."
        )
_proxy_ssl_header = env_str("LEASEHOLD_PROXY_SSL_HEADER").strip()
if _proxy_ssl_header:
    # The header the proxy sets to "https" on requests it received over TLS,
    # e.g. X-Forwarded-Proto. Only set it behind a proxy that always sets or
    # strips it: a client could otherwise claim TLS it never used.
    if not all(part.isalnum() for part in _proxy_ssl_header.split("-")):
        raise ImproperlyConfigured(
            f"LEASEHOLD_PROXY_SSL_HEADER must be a header name such as X-Forwarded-Proto; got {_proxy_ssl_header!r}."
        )
    SECURE_PROXY_SSL_HEADER = ("HTTP_" + _proxy_ssl_header.upper().replace("-", "_"), "https")
if LEASEHOLD_HTTPS:
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_SSL_REDIRECT = True
    # Probes and the scrape reach the server directly over HTTP, and a 301 would count as a pass
    # (probes) or fail the scrape: they are answered where they are asked.
    SECURE_REDIRECT_EXEMPT = [r"^healthz/?$", r"^readyz/?$", r"^metrics/?$"]
    SECURE_HSTS_SECONDS = env_int("LEASEHOLD_HSTS_SECONDS", 31536000, minimum=0)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("LEASEHOLD_HSTS_INCLUDE_SUBDOMAINS", True)
    SECURE_HSTS_PRELOAD = env_bool("LEASEHOLD_HSTS_PRELOAD", False)
    if not SECURE_HSTS_PRELOAD:
        # Preloading submits the domain to the browsers' built-in lists, which
        # is hard to undo: the operator's decision (LEASEHOLD_HSTS_PRELOAD=1),
        # not a default. Everything else `check --deploy` asks for is on.
        SILENCED_SYSTEM_CHECKS = ["security.W021"]

# --- Rate limits and lockout (docs/operations.md, "Security") --------------

# How many proxies in front of the server append to X-Forwarded-For: the
# client address (throttles, lockout) is read that many hops from the right.
# 0 (default): the socket's address, and X-Forwarded-For is ignored.
LEASEHOLD_TRUSTED_PROXIES = env_int("LEASEHOLD_TRUSTED_PROXIES", 0, minimum=0, maximum=5)
# API rate limits (api/throttles.py): per client address for failed bearer
# authentications, per agent for requests (0 turns the agent limit off).
LEASEHOLD_AUTH_FAILURES_PER_MINUTE = env_int("LEASEHOLD_AUTH_FAILURES_PER_MINUTE", 20, minimum=1)
LEASEHOLD_AGENT_REQUESTS_PER_MINUTE = env_int("LEASEHOLD_AGENT_REQUESTS_PER_MINUTE", 6000, minimum=0)
# Admin login lockout (django-axes): per user name and client address together, reset by a success.
# One user's failures do not lock out the other users behind the same address (a NAT, an office).
AXES_FAILURE_LIMIT = env_int("LEASEHOLD_ADMIN_LOGIN_FAILURES", 10, minimum=1)
AXES_COOLOFF_TIME = timedelta(minutes=env_int("LEASEHOLD_ADMIN_LOCKOUT_MINUTES", 15, minimum=1))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_VERBOSE = False
# The same client address as the API's throttles (X-Forwarded-For only through trusted proxies).
AXES_CLIENT_IP_CALLABLE = "api.throttles.client_address"

"""Leasehold settings, driven by environment variables (SPEC §14).

Everything is prefixed `LEASEHOLD_` except `DATABASE_URL`. A bad value stops
start-up with a message naming the variable (see `core.env`).
"""

from __future__ import annotations

import os
import secrets
import sys
from pathlib import Path
from typing import Any

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from config.logs import logging_config
from core.connections import DEFAULT_WEB_THREADS, DEFAULT_WEB_WORKERS, ConnectionBudget
from core.db import PrivateFileConnection
from core.env import env_bool, env_int, env_list, env_str
from core.pool_check import note_returned
from core.sqlite_wal import SQLITE_INIT_PRAGMAS

BASE_DIR = Path(__file__).resolve().parent.parent.parent
DATA_DIR = Path(env_str("LEASEHOLD_DATA_DIR", str(BASE_DIR / "var"))).resolve()

DEBUG = env_bool("LEASEHOLD_DEBUG", False)


def _secret_key() -> str:
    """The configured key; in debug mode a development key kept under `var/`."""
    configured = env_str("LEASEHOLD_SECRET_KEY")
    if configured:
        if len(configured) < 32:
            raise ImproperlyConfigured("LEASEHOLD_SECRET_KEY must be at least 32 characters long.")
        return configured
    if not DEBUG:
        raise ImproperlyConfigured(
            "LEASEHOLD_SECRET_KEY is not set. Set it (at least 32 random characters), "
            "or set LEASEHOLD_DEBUG=1 to use a development key generated under LEASEHOLD_DATA_DIR."
        )
    key_file = DATA_DIR / "secret_key"
    if not key_file.exists():
        DATA_DIR.mkdir(mode=0o700, parents=True, exist_ok=True)
        # Created 0600, never readable by others even for a moment, whatever the umask.
        descriptor = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w") as out:
            out.write(secrets.token_urlsafe(50))
    return key_file.read_text().strip()


SECRET_KEY = _secret_key()
# Earlier keys, still accepted where a value signed under them must be read back
# (sessions, and the lease token a replayed claim re-derives): rotate by moving
# the old key here, comma-separated, for as long as the oldest live lease
# and idempotency record (24 h) may need it.
SECRET_KEY_FALLBACKS = env_list("LEASEHOLD_SECRET_KEY_FALLBACKS", [])
ALLOWED_HOSTS = env_list("LEASEHOLD_ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"])

INSTALLED_APPS = [
    "console.site.LeaseholdAdminConfig",  # django.contrib.admin with the fleet dashboard
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_q",
    "axes",
    "ledger",
    "environments",
    "leases",
    "reconciliation",
    "landing",
    "runners",
    "insight",
    "push",
    "operations",
    "console",  # the admin control plane: registers every model's admin (console.admin)
]

MIDDLEWARE = [
    "api.request_log.RequestLogMiddleware",
    "core.deadline.StorageDeadlineMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    # The session user and messages: Django's own, except that an API request with an Authorization
    # header (the bearer token decides it alone) skips them (api/browser_only.py).
    "api.browser_only.BrowserAuthenticationMiddleware",
    "api.browser_only.BrowserMessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Admin login lockout (django-axes); last, as its documentation asks.
    "axes.middleware.AxesMiddleware",
]

AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]


# The web server's processes and threads: serve passes its --workers and --threads (core.connections).
LEASEHOLD_WEB_WORKERS = env_int("LEASEHOLD_WEB_WORKERS", DEFAULT_WEB_WORKERS, minimum=1)
LEASEHOLD_WEB_THREADS = env_int("LEASEHOLD_WEB_THREADS", DEFAULT_WEB_THREADS, minimum=1)
# PgBouncer (or another pooler) in transaction mode between the server and PostgreSQL: the one switch
# that turns server-side cursors and server-side prepared statements off (docs/operations.md).
LEASEHOLD_DB_TRANSACTION_POOLING = env_bool("LEASEHOLD_DB_TRANSACTION_POOLING", False)
# `core.prepared`'s hot statements run through a server-binding psycopg cursor, which prepares each on
# the server after `LEASEHOLD_DB_PREPARE_THRESHOLD` uses on a connection (issue 34; docs/performance.md,
# "Prepared statements and the request's own statements"). Off behind a transaction pooler, where a
# statement prepared in one server connection is not there for the next transaction.
LEASEHOLD_DB_PREPARED_STATEMENTS = env_bool("LEASEHOLD_DB_PREPARED_STATEMENTS", not LEASEHOLD_DB_TRANSACTION_POOLING)
LEASEHOLD_DB_PREPARE_THRESHOLD = env_int("LEASEHOLD_DB_PREPARE_THRESHOLD", 2, minimum=0, maximum=1000)
if LEASEHOLD_DB_PREPARED_STATEMENTS and LEASEHOLD_DB_TRANSACTION_POOLING:
    raise ImproperlyConfigured(
        "LEASEHOLD_DB_PREPARED_STATEMENTS cannot be on with LEASEHOLD_DB_TRANSACTION_POOLING: a statement prepared "
        "in one server connection is missing in the next transaction's."
    )
# A direct connection to PostgreSQL for LISTEN (push.waiting); required with LEASEHOLD_DB_TRANSACTION_POOLING,
# since a pooler in transaction mode does not deliver notifications. Empty: DATABASE_URL.
LEASEHOLD_LISTEN_DATABASE_URL = env_str("LEASEHOLD_LISTEN_DATABASE_URL")

_storage_deadline = env_int("LEASEHOLD_STORAGE_DEADLINE_SECONDS", 20, minimum=1, maximum=600)
# Every PostgreSQL session of the application: a lock wait ends within a request's storage deadline
# (core.deadline; write_transaction retries SQLSTATE 55P03 while the deadline lasts), and JIT
# compilation is off (issue 34: the application's statements are short, and JIT only ever added its
# compile time to them; docs/performance.md, "Connections budgeted"). Sent as startup options, or,
# behind a transaction pooler, set on the role (docs/operations.md, "PgBouncer"; serve checks them).
DB_SESSION_SETTINGS = {"lock_timeout": f"{_storage_deadline}s", "jit": "off"}


def _database() -> dict[str, Any]:
    """SQLite under LEASEHOLD_DATA_DIR by default; DATABASE_URL switches to PostgreSQL.

    SQLite runs in WAL mode with IMMEDIATE write transactions so writers take
    the lock up front instead of upgrading mid-transaction (SPEC §11).
    PostgreSQL uses psycopg 3 with psycopg_pool through Django's pool option.
    """
    url = env_str("DATABASE_URL")
    if url and _running_cluster():
        # The cluster's own way in, e.g. a PgBouncer database of its own with a pool of its own,
        # so that a saturated web pool never delays a sweep (docs/operations.md, "PgBouncer").
        url = env_str("LEASEHOLD_CLUSTER_DATABASE_URL") or url
    if not url:
        return {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": DATA_DIR / "leasehold.sqlite3",
            # Each server thread keeps its connection (issue 20): opening one per request ran the
            # init PRAGMAs every time, and closing the last one checkpointed and removed the WAL
            # file every time (measured: ~1 ms of the server's CPU per request).
            "CONN_MAX_AGE": None,
            "OPTIONS": {
                # The database file 0600 in a 0700 data directory, whatever the umask (core.db).
                "factory": PrivateFileConnection,
                "transaction_mode": "IMMEDIATE",
                "timeout": 5,
                # WAL, and its file cut back after each checkpoint that starts the log again (core.sqlite_wal).
                "init_command": SQLITE_INIT_PRAGMAS,
            },
        }
    if not url.startswith(("postgres://", "postgresql://")):
        raise ImproperlyConfigured(
            f"DATABASE_URL must start with postgres:// or postgresql://; got scheme {url.split(':', 1)[0]!r}."
        )
    try:
        config: dict[str, Any] = dict(dj_database_url.parse(url))
    except ValueError as exc:
        raise ImproperlyConfigured(f"DATABASE_URL cannot be parsed: {exc}") from None
    if LEASEHOLD_DB_TRANSACTION_POOLING:
        # Behind PgBouncer in transaction mode (docs/operations.md, "PgBouncer"): no startup
        # `options` (PgBouncer refuses them; the role carries these settings instead:
        # ALTER ROLE ... SET), no server-side cursors and no server-side prepared statements,
        # which live in one server connection while the next transaction may get another.
        config["OPTIONS"] = {"prepare_threshold": None}
        config["DISABLE_SERVER_SIDE_CURSORS"] = True
        if not LEASEHOLD_LISTEN_DATABASE_URL:
            raise ImproperlyConfigured(
                "LEASEHOLD_DB_TRANSACTION_POOLING needs LEASEHOLD_LISTEN_DATABASE_URL: a direct connection to "
                "PostgreSQL for LISTEN, which a pooler in transaction mode does not deliver."
            )
    else:
        config["OPTIONS"] = {
            "options": " ".join(f"-c {name}={value}" for name, value in DB_SESSION_SETTINGS.items()),
            # Only the server-binding cursor of `core.prepared` prepares; Django's own cursor binds on the client.
            "prepare_threshold": LEASEHOLD_DB_PREPARE_THRESHOLD,
        }
    # Read by the backend `core.postgresql` (`DatabaseWrapper.statement_cursor`).
    config["PREPARED_STATEMENTS"] = LEASEHOLD_DB_PREPARED_STATEMENTS
    config["ENGINE"] = "core.postgresql"
    if _running_cluster():
        # django-q2 forks its workers after closing connections; a pooled
        # connection is only returned to the pool, and every child would
        # inherit the same open socket. The cluster connects without a pool,
        # and each of its processes keeps its one connection: they are the
        # cluster's own (core.connections), so a busy web server cannot take them.
        config["CONN_MAX_AGE"] = None
        config["CONN_HEALTH_CHECKS"] = True
        return config
    config["CONN_MAX_AGE"] = 0
    config["OPTIONS"]["pool"] = {
        "min_size": env_int("LEASEHOLD_DB_POOL_MIN", 1, minimum=0),
        # Every thread of the worker process that can run a request, no more (core.connections).
        "max_size": env_int(
            "LEASEHOLD_DB_POOL_MAX",
            ConnectionBudget(LEASEHOLD_WEB_WORKERS, LEASEHOLD_WEB_THREADS, cluster_workers=0).pool_size,
            minimum=1,
        ),
        "timeout": 10,
        # An unused connection is closed after this long; psycopg_pool closes one per interval.
        "max_idle": env_int("LEASEHOLD_DB_POOL_MAX_IDLE_SECONDS", 10, minimum=1),
        "reset": note_returned,
    }
    # The pool's connections are checked before a request uses them, so one the server dropped
    # (restart, failover, a terminated backend) is replaced instead of failing the request that got
    # it; the empty round trip is sent only when the connection is not known good (core.pool_check,
    # by the backend core.postgresql; issue 34: it was one of every request's round trips).
    config["CONN_HEALTH_CHECKS"] = False
    config["POOL_CHECK_IDLE_SECONDS"] = env_int("LEASEHOLD_DB_POOL_CHECK_IDLE_SECONDS", 5, minimum=0, maximum=3600)
    return config


def _running_cluster() -> bool:
    return len(sys.argv) > 1 and sys.argv[1] == "qcluster"


DATABASES = {"default": _database()}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
# Exact UTC timestamps with seconds on every admin page (config/formats/en/formats.py).
FORMAT_MODULE_PATH = ["config.formats"]
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = DATA_DIR / "static"
# Files Django's storages write under the data directory (collected static files) are the server's
# alone, as everything else there (whitenoise serves them from the same process).
FILE_UPLOAD_PERMISSIONS = 0o600
FILE_UPLOAD_DIRECTORY_PERMISSIONS = 0o700
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}

# Django's 4xx lines at INFO without traceback, a bad Host header in one line (config.logs.ExpectedResponses).
_json_logs = env_str("LEASEHOLD_LOG_FORMAT", "text") == "json"
LOGGING = logging_config(json_lines=_json_logs, level="INFO" if DEBUG else "WARNING")
if _json_logs:
    # One JSON object per line (docs/operations.md, "Logs"); the request log is INFO even without DEBUG.
    LOGGING["loggers"]["leasehold.request"] = {"level": "INFO"}

# HTTPS behind a proxy, rate limits and the admin lockout: config/settings/security.py.
from config.settings.security import *  # noqa: E402, F403

# --- Leasehold --------------------------------------------------------------

LEASEHOLD_MIN_LEASE_SECONDS = env_int("LEASEHOLD_MIN_LEASE_SECONDS", 30, minimum=1)
LEASEHOLD_MAX_LEASE_SECONDS = env_int("LEASEHOLD_MAX_LEASE_SECONDS", 86400, minimum=1)
if LEASEHOLD_MIN_LEASE_SECONDS > LEASEHOLD_MAX_LEASE_SECONDS:
    raise ImproperlyConfigured(
        "LEASEHOLD_MIN_LEASE_SECONDS must not exceed LEASEHOLD_MAX_LEASE_SECONDS "
        f"({LEASEHOLD_MIN_LEASE_SECONDS} > {LEASEHOLD_MAX_LEASE_SECONDS})."
    )
# Every storage wait of one request ends by then (core.deadline); below the web server's timeout.
LEASEHOLD_STORAGE_DEADLINE_SECONDS = env_int("LEASEHOLD_STORAGE_DEADLINE_SECONDS", 20, minimum=1, maximum=600)
# SPEC §25: one search request's time bound (statement_timeout; SQLite: a progress handler), then SEARCH_TOO_BROAD.
LEASEHOLD_SEARCH_TIMEOUT_MS = env_int("LEASEHOLD_SEARCH_TIMEOUT_MS", 2000, minimum=50, maximum=60_000)
LEASEHOLD_CONTEXT_MAX_BYTES = env_int("LEASEHOLD_CONTEXT_MAX_BYTES", 16384, minimum=2048)
LEASEHOLD_AGENT_SILENCE_SECONDS = env_int("LEASEHOLD_AGENT_SILENCE_SECONDS", 600, minimum=1)
LEASEHOLD_STALL_SECONDS = env_int("LEASEHOLD_STALL_SECONDS", 1800, minimum=1)
# The incident rules' thresholds (insight.incidents; docs/admin.md, "Incidents"). An endpoint is
# disabled after 20 failures in a row (push.services.deliveries), so a higher threshold would never hold.
LEASEHOLD_INCIDENT_RECONCILIATION_RUNS = env_int("LEASEHOLD_INCIDENT_RECONCILIATION_RUNS", 3, minimum=1, maximum=100)
LEASEHOLD_INCIDENT_WEBHOOK_FAILURES = env_int("LEASEHOLD_INCIDENT_WEBHOOK_FAILURES", 3, minimum=1, maximum=20)
LEASEHOLD_INCIDENT_LANDING_STUCK_MINUTES = env_int("LEASEHOLD_INCIDENT_LANDING_STUCK_MINUTES", 30, minimum=1)
# --- Backups (SPEC §17) -------------------------------------------------------
# Set: a daily django-q2 backup into this directory (operations.schedules), keeping the newest LEASEHOLD_BACKUP_KEEP.
_backup_dir = env_str("LEASEHOLD_BACKUP_DIR").strip()
LEASEHOLD_BACKUP_DIR = str(Path(_backup_dir).resolve()) if _backup_dir else ""
LEASEHOLD_BACKUP_KEEP = env_int("LEASEHOLD_BACKUP_KEEP", 7, minimum=1)
# --- Push and observability (SPEC §18) ---------------------------------------
# Webhook targets resolving to loopback, private or link-local addresses are refused unless this is set.
LEASEHOLD_WEBHOOK_ALLOW_PRIVATE = env_bool("LEASEHOLD_WEBHOOK_ALLOW_PRIVATE", False)
# Where the admin is reached from outside, for links in Slack messages (e.g. https://leasehold.example.com).
LEASEHOLD_PUBLIC_URL = env_str("LEASEHOLD_PUBLIC_URL").rstrip("/")
if LEASEHOLD_PUBLIC_URL and not LEASEHOLD_PUBLIC_URL.startswith(("https://", "http://")):
    raise ImproperlyConfigured(
        f"LEASEHOLD_PUBLIC_URL must start with https:// or http://; got {LEASEHOLD_PUBLIC_URL!r}."
    )
# Bearer token Prometheus presents at GET /metrics (a staff session works too); empty: staff only.
LEASEHOLD_METRICS_TOKEN = env_str("LEASEHOLD_METRICS_TOKEN")
if LEASEHOLD_METRICS_TOKEN and len(LEASEHOLD_METRICS_TOKEN) < 16:
    raise ImproperlyConfigured("LEASEHOLD_METRICS_TOKEN must be at least 16 characters long.")
LEASEHOLD_LOG_FORMAT = env_str("LEASEHOLD_LOG_FORMAT", "text")
if LEASEHOLD_LOG_FORMAT not in ("text", "json"):
    raise ImproperlyConfigured(f"LEASEHOLD_LOG_FORMAT must be text or json; got {LEASEHOLD_LOG_FORMAT!r}.")
# The agent cycle's hot writes served below the full middleware stack, with the same answers
# (api/lean.py; docs/performance.md, "The lean path"). Off: every request takes the full stack.
LEASEHOLD_LEAN_PATH = env_bool("LEASEHOLD_LEAN_PATH", True)
LEASEHOLD_REDIS_URL = env_str("LEASEHOLD_REDIS_URL")
if LEASEHOLD_REDIS_URL and not LEASEHOLD_REDIS_URL.startswith(("redis://", "rediss://", "unix://")):
    raise ImproperlyConfigured(f"LEASEHOLD_REDIS_URL must be a redis:// URL; got {LEASEHOLD_REDIS_URL!r}.")
# Waiters of the changes feed (`/changes/?wait=`, `/changes/stream/`) open at once, per agent (or staff
# user) and per client address, for the whole server (core/parking.py; docs/operations.md, "Workers").
LEASEHOLD_WAITERS_PER_AGENT = env_int("LEASEHOLD_WAITERS_PER_AGENT", 20, minimum=1)
LEASEHOLD_WAITERS_PER_ADDRESS = env_int("LEASEHOLD_WAITERS_PER_ADDRESS", 100, minimum=1)

# The cache holds the API's rate-limit windows (api/throttles.py): in Redis, shared by every server
# process, when LEASEHOLD_REDIS_URL is set; otherwise in each process's memory (each counts on its own).
if LEASEHOLD_REDIS_URL:
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": LEASEHOLD_REDIS_URL,
            "KEY_PREFIX": "leasehold",
        }
    }

# --- django-q2 (SPEC §9) ------------------------------------------------------

Q_CLUSTER: dict[str, Any] = {
    "name": "leasehold",
    "workers": 2,
    "timeout": 240,
    "retry": 300,
    "catch_up": False,
    "save_limit": 1000,
    "ack_failures": True,
    "max_attempts": 1,
}
if LEASEHOLD_REDIS_URL:
    Q_CLUSTER["redis"] = LEASEHOLD_REDIS_URL
else:
    Q_CLUSTER["orm"] = "default"

# --- Django REST framework ---------------------------------------------------

REST_FRAMEWORK: dict[str, Any] = {
    "DEFAULT_SCHEMA_CLASS": "api.schema.ApiAutoSchema",
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    "UNAUTHENTICATED_USER": None,
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "api.auth.AgentTokenAuthentication",
        # The admin's session, for the browsable API (CSRF enforced on writes).
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["api.auth.IsAgentOrStaff"],
    "DEFAULT_PARSER_CLASSES": ["api.inputs.JsonBodyParser"],
    "DEFAULT_RENDERER_CLASSES": ["api.inputs.JsonRenderer", "rest_framework.renderers.BrowsableAPIRenderer"],
    "EXCEPTION_HANDLER": "api.errors.exception_handler",
    "DEFAULT_THROTTLE_CLASSES": ["api.throttles.AgentRateThrottle"],
    "TEST_REQUEST_DEFAULT_FORMAT": "json",
}

SPECTACULAR_SETTINGS = {
    "TITLE": "Leasehold API",
    "DESCRIPTION": "Leased claims, epochs and checkpoints for fleets of AI coding agents.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "SCHEMA_PATH_PREFIX": "/api/v1",
    "ENUM_NAME_OVERRIDES": {
        "TaskStatusEnum": ["open", "ready", "blocked", "review", "delivered", "done", "cancelled"],
        "InitialTaskStatusEnum": ["blocked", "open", "ready"],
        "AttemptStatusEnum": ["active", "completed", "failed", "interrupted", "released", "expired", "revoked"],
        "NoteKindEnum": ["progress", "finding", "warning", "checkpoint", "landing"],
        "AgentNoteKindEnum": ["progress", "finding", "warning", "checkpoint"],
        "SearchHitKindEnum": ["task", "note"],
        "ReviewStatusEnum": [
            "open",
            "in_review",
            "approved",
            "changes_requested",
            "blocked",
            "superseded",
            "cancelled",
        ],
        "DecisionStatusEnum": ["active", "superseded"],
        "PathsModeEnum": ["exclusive", "shared"],
    },
    "PREPROCESSING_HOOKS": ["api.schema.expand_routes"],
    # drf-spectacular's own enum hook first: the others read the components it settles.
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "api.schema.close_request_bodies",
        "api.schema.link_operations",
    ],
    "PATH_CONVERTER_OVERRIDES": {
        "taskkey": {"type": "string", "pattern": "^[A-Z][A-Z0-9]{0,9}-[1-9][0-9]{0,8}$"},
        "attemptid": {"type": "integer", "minimum": 1, "maximum": 999999999999999999},
    },
}

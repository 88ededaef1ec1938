"""HTTPS can be switched on (issue 14, finding 5): `check --deploy` is clean with LEASEHOLD_HTTPS=1."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.config.test_settings_env import start_django

ROOT = Path(__file__).resolve().parents[2]
SECRET = "a-production-secret-key-that-is-long-and-random-enough-0123456789"


def check_deploy(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    # The browser tests set DJANGO_ALLOW_ASYNC_UNSAFE in this process, which a deployment must not.
    ignored = {"DATABASE_URL", "DJANGO_ALLOW_ASYNC_UNSAFE"}
    clean = {k: v for k, v in os.environ.items() if not k.startswith("LEASEHOLD_") and k not in ignored}
    clean.update(
        {
            "LEASEHOLD_DATA_DIR": str(tmp_path),
            "LEASEHOLD_SECRET_KEY": SECRET,
            "LEASEHOLD_ALLOWED_HOSTS": "leasehold.example.org",
            "DJANGO_SETTINGS_MODULE": "config.settings.base",
        }
    )
    clean.update(env)
    return subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env=clean,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_check_deploy_is_clean_with_https_on(tmp_path):
    result = check_deploy(
        tmp_path,
        LEASEHOLD_HTTPS="1",
        LEASEHOLD_CSRF_TRUSTED_ORIGINS="https://leasehold.example.org",
        LEASEHOLD_PROXY_SSL_HEADER="X-Forwarded-Proto",
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def test_check_deploy_names_the_https_warnings_without_it(tmp_path):
    result = check_deploy(tmp_path)
    assert result.returncode != 0
    for warning in ("security.W004", "security.W008", "security.W012", "security.W016"):
        assert warning in result.stderr + result.stdout


def test_https_settings_are_what_the_variables_say(tmp_path):
    code = (
        "import django; django.setup(); from django.conf import settings as s; "
        "print(s.SESSION_COOKIE_SECURE, s.CSRF_COOKIE_SECURE, s.SECURE_SSL_REDIRECT, s.SECURE_HSTS_SECONDS, "
        "s.SECURE_PROXY_SSL_HEADER, s.CSRF_TRUSTED_ORIGINS)"
    )
    clean = {k: v for k, v in os.environ.items() if not k.startswith("LEASEHOLD_") and k != "DATABASE_URL"}
    clean.update(
        {
            "LEASEHOLD_DATA_DIR": str(tmp_path),
            "LEASEHOLD_SECRET_KEY": SECRET,
            "DJANGO_SETTINGS_MODULE": "config.settings.base",
            "LEASEHOLD_HTTPS": "1",
            "LEASEHOLD_HSTS_SECONDS": "3600",
            "LEASEHOLD_PROXY_SSL_HEADER": "X-Forwarded-Proto",
            "LEASEHOLD_CSRF_TRUSTED_ORIGINS": "https://a.example.org,https://b.example.org",
        }
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=clean, capture_output=True, text=True)
    assert result.stdout.split("\n")[0] == (
        "True True True 3600 ('HTTP_X_FORWARDED_PROTO', 'https') ['https://a.example.org', 'https://b.example.org']"
    ), result.stderr


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("LEASEHOLD_HTTPS", "sometimes"),
        ("LEASEHOLD_CSRF_TRUSTED_ORIGINS", "leasehold.example.org"),
        ("LEASEHOLD_PROXY_SSL_HEADER", "X-Forwarded-Proto: https"),
        ("LEASEHOLD_SECRET_KEY_FALLBACKS", " , "),
    ],
)
def test_a_bad_https_value_stops_startup_naming_the_variable(tmp_path, variable, value):
    result = start_django(tmp_path, LEASEHOLD_DEBUG="1", **{variable: value})
    assert result.returncode != 0
    assert variable in result.stderr


def test_probes_and_the_scrape_are_exempt_from_the_https_redirect(tmp_path):
    # Load balancers, orchestrators and Prometheus reach the server over plain HTTP: a 301 would
    # count as a passing probe, and fail the documented scrape (issue 27, L7).
    code = (
        "import django; django.setup(); from django.test import RequestFactory; "
        "from django.middleware.security import SecurityMiddleware; "
        "middleware = SecurityMiddleware(lambda request: None); "
        "paths = ['/healthz', '/readyz', '/metrics', '/healthz/', '/admin/login/', '/api/v1/projects/', '/metricsx']; "
        "print(' '.join(str(getattr(middleware.process_request(RequestFactory().get(p, HTTP_HOST='a.example.org')), "
        "'status_code', 'served')) for p in paths))"
    )
    clean = {k: v for k, v in os.environ.items() if not k.startswith("LEASEHOLD_") and k != "DATABASE_URL"}
    clean.update(
        {
            "LEASEHOLD_DATA_DIR": str(tmp_path),
            "LEASEHOLD_SECRET_KEY": SECRET,
            "LEASEHOLD_ALLOWED_HOSTS": "a.example.org",
            "DJANGO_SETTINGS_MODULE": "config.settings.base",
            "LEASEHOLD_HTTPS": "1",
        }
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=clean, capture_output=True, text=True)
    assert result.stdout.split("\n")[0] == "served served served served 301 301 301", result.stderr

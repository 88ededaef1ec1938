"""Limits that several users or several processes share (issue 27, M1).

The admin lockout is keyed by user name and address together, so one
user's failures behind a NAT do not lock out the others there; with
`LEASEHOLD_REDIS_URL` the API's rate-limit counters live in Redis, shared by
every server process (per process otherwise).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

ROOT = Path(__file__).resolve().parents[2]
LOGIN = "/admin/login/?next=/admin/"
REDIS = ("127.0.0.1", 6379)


def _login(username: str, password: str):
    return Client().post(LOGIN, {"username": username, "password": password}, REMOTE_ADDR="203.0.113.7")


@pytest.mark.django_db
def test_one_users_failures_do_not_lock_out_another_user_on_the_same_address(settings):
    assert settings.AXES_FAILURE_LIMIT == 10
    get_user_model().objects.create_superuser("mallory", password="pw-of-mallory")
    get_user_model().objects.create_superuser("alice", password="pw-of-alice")
    for _ in range(10):
        _login("mallory", "wrong")
    assert _login("mallory", "pw-of-mallory").status_code == 429  # the failing user is locked out
    answer = _login("alice", "pw-of-alice")
    assert answer.status_code == 302, answer.status_code
    assert answer["Location"] == "/admin/"


def _redis_is_up() -> bool:
    try:
        with socket.create_connection(REDIS, timeout=1):
            return True
    except OSError:
        return False


def _count_failures_in_a_process(tmp_path: Path, redis_url: str | None) -> str:
    """One more server process: three bad tokens from one address, and what the throttle then answers."""
    code = (
        "import django; django.setup(); from django.conf import settings; "
        "from rest_framework.test import APIClient; "
        "from django.test.utils import setup_test_environment; setup_test_environment(); "
        "from django.core.cache import caches; from api.throttles import _window; "
        "client = APIClient(); client.credentials(HTTP_AUTHORIZATION='Bearer lh_not-a-token'); "
        "started = _window()[0]; "
        "statuses = [client.get('/api/v1/projects/', REMOTE_ADDR='198.51.100.77').status_code for _ in range(3)]; "
        "print(type(caches['default']).__name__, *statuses, started, _window()[0])"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEASEHOLD_") and k != "DATABASE_URL"}
    env.update(
        {
            "LEASEHOLD_DATA_DIR": str(tmp_path),
            "LEASEHOLD_DEBUG": "1",
            "LEASEHOLD_AUTH_FAILURES_PER_MINUTE": "4",
            "DJANGO_SETTINGS_MODULE": "config.settings.base",
        }
    )
    if redis_url:
        env["LEASEHOLD_REDIS_URL"] = redis_url
    if not (tmp_path / "leasehold.sqlite3").exists():
        subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True, timeout=120)
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout.strip()


@pytest.mark.skipif(not _redis_is_up(), reason="no Redis on 127.0.0.1:6379")
def test_with_redis_the_failure_counts_are_shared_by_every_process(tmp_path):
    import redis

    database = 15
    url = f"redis://{REDIS[0]}:{REDIS[1]}/{database}"
    store = redis.Redis(host=REDIS[0], port=REDIS[1], db=database)
    try:
        for _ in range(3):  # until both processes ran within one window (a minute may turn between them)
            store.flushdb()
            # Two server processes, one after the other: the second sees the first's failures.
            first = _count_failures_in_a_process(tmp_path, url).split()
            second = _count_failures_in_a_process(tmp_path, url).split()
            if len(set(first[4:] + second[4:])) == 1:
                break
    finally:
        store.flushdb()
    assert len(set(first[4:] + second[4:])) == 1, (first, second)
    assert first[:4] == ["RedisCache", "401", "401", "401"]
    assert second[:4] == ["RedisCache", "401", "429", "429"]


def test_without_redis_each_process_counts_on_its_own(tmp_path):
    first = _count_failures_in_a_process(tmp_path, None).split()[:4]
    second = _count_failures_in_a_process(tmp_path, None).split()[:4]
    assert first == second == ["LocMemCache", "401", "401", "401"]


@pytest.mark.django_db
def test_an_unreachable_redis_turns_the_limits_off_instead_of_failing_every_request(settings, caplog):
    from django.core.cache import caches

    from tests.api.conftest import client_for
    from tests.factories import AgentFactory, ProjectFactory

    agent = AgentFactory(projects=[ProjectFactory(slug="web")])
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    settings.CACHES = {
        "default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": f"redis://127.0.0.1:{port}/0"}
    }
    try:
        assert client_for(agent).get("/api/v1/projects/").status_code == 200
        bad = client_for(agent)
        bad.credentials(HTTP_AUTHORIZATION="Bearer lh_not-a-token")
        assert bad.get("/api/v1/projects/").status_code == 401
    finally:
        caches["default"].close()
        del caches["default"]
    assert any("unreachable" in record.getMessage() for record in caplog.records)

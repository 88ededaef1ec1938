"""Admin login lockout (issue 14, finding 10): the right password no longer works after repeated failures."""

from __future__ import annotations

import pytest
from django.test import Client

pytestmark = pytest.mark.django_db

LOGIN = "/admin/login/?next=/admin/"


def _login(client: Client, password: str, address: str = "203.0.113.7"):
    return client.post(LOGIN, {"username": "root", "password": password}, REMOTE_ADDR=address)


def test_the_right_password_is_refused_after_ten_failures_from_one_address(admin_user, settings):
    assert settings.AXES_FAILURE_LIMIT == 10
    client = Client()
    for _ in range(9):
        assert _login(client, "wrong").status_code == 200  # the form again, with its error
    locked = _login(client, "wrong")
    assert locked.status_code == 429
    assert _login(client, "pw-for-tests").status_code == 429
    assert "_auth_user_id" not in client.session


def test_another_address_is_not_locked_out(admin_user):
    client = Client()
    for _ in range(10):
        _login(client, "wrong")
    response = _login(Client(), "pw-for-tests", address="198.51.100.9")
    assert response.status_code == 302
    assert response["Location"] == "/admin/"


def test_a_success_before_the_limit_resets_the_count(admin_user):
    client = Client()
    for _ in range(9):
        _login(client, "wrong")
    assert _login(client, "pw-for-tests").status_code == 302
    for _ in range(9):
        assert _login(Client(), "wrong").status_code == 200
    assert _login(Client(), "pw-for-tests").status_code == 302


def test_behind_a_trusted_proxy_the_lockout_follows_the_forwarded_address(admin_user, settings):
    settings.LEASEHOLD_TRUSTED_PROXIES = 1
    client = Client()
    for _ in range(10):
        client.post(LOGIN, {"username": "root", "password": "wrong"}, HTTP_X_FORWARDED_FOR="203.0.113.7")
    locked = client.post(LOGIN, {"username": "root", "password": "pw-for-tests"}, HTTP_X_FORWARDED_FOR="203.0.113.7")
    assert locked.status_code == 429
    other = Client().post(LOGIN, {"username": "root", "password": "pw-for-tests"}, HTTP_X_FORWARDED_FOR="203.0.113.8")
    assert other.status_code == 302

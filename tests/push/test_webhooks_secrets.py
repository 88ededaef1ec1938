"""Webhook signing secrets at rest (issue 27): encrypted with a key derived from the secret key.

Neither the database, nor `dumpdata`, nor a backup holds a secret in clear; a
server whose secret key was rotated still signs with the fallbacks, and
`reencrypt_webhook_secrets` lets the old key go; the migration encrypts the
rows that exist and decrypts them going back.
"""

from __future__ import annotations

import io
import subprocess
from datetime import UTC, datetime

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.test import override_settings

from ledger.actors import SYSTEM
from ledger.models import EventType
from push.models import DeliveryStatus, WebhookDelivery, WebhookEndpoint
from push.secret_box import SecretUnreadable, decrypt
from push.services.deliveries import webhook_deliveries_run
from push.services.webhooks import webhook_create, webhook_roll_secret
from tests.factories import ProjectFactory, TaskFactory
from tests.webhook_receiver import running_receiver

OLD_KEY = "the-old-secret-key-of-this-server-0123456789"
NEW_KEY = "the-new-secret-key-of-this-server-9876543210"


def _stored() -> list[tuple[str, str]]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT secret, previous_secret FROM ledger_webhookendpoint ORDER BY id")
        return list(cursor.fetchall())


@pytest.mark.django_db
def test_the_database_and_a_dump_hold_no_secret_in_clear():
    endpoint, first = webhook_create(url="http://127.0.0.1:9/hook", actor=SYSTEM)
    _, second = webhook_roll_secret(endpoint=endpoint, actor=SYSTEM)
    ((secret, previous_secret),) = _stored()
    assert (decrypt(secret), decrypt(previous_secret)) == (second, first)
    assert "lhwh_" not in secret + previous_secret
    dump = io.StringIO()
    call_command("dumpdata", "push", stdout=dump)
    assert dump.getvalue().count('"secret"') == 1
    assert first not in dump.getvalue()
    assert second not in dump.getvalue()


@pytest.mark.django_db(transaction=True)
def test_a_backup_holds_no_secret_in_clear(tmp_path):
    _, secret = webhook_create(url="http://127.0.0.1:9/hook", actor=SYSTEM)
    dest = tmp_path / "backup"
    call_command("backup", str(dest), stdout=io.StringIO())
    if connection.vendor == "postgresql":  # a compressed archive: read as the SQL it restores
        content = subprocess.run(["pg_restore", "--file=-", str(dest)], capture_output=True, check=True).stdout
        assert b"ledger_webhookendpoint" in content
    else:
        content = dest.read_bytes()
    assert b"lhwh_" not in content
    assert secret.encode() not in content


@pytest.mark.django_db
def test_after_a_key_rotation_the_fallback_reads_the_secrets_until_they_are_encrypted_anew(clock):
    with running_receiver() as receiver, override_settings(SECRET_KEY=OLD_KEY, SECRET_KEY_FALLBACKS=[]):
        endpoint, secret = webhook_create(url=receiver.url, event_types=[EventType.TASK_CREATED], actor=SYSTEM)
        receiver.secrets.append(secret)
        project = ProjectFactory()

        with override_settings(SECRET_KEY=NEW_KEY, SECRET_KEY_FALLBACKS=[]):  # rotated, the old key dropped
            TaskFactory(project=project)
            webhook_deliveries_run()
            lost = WebhookDelivery.objects.get()
            assert lost.status == DeliveryStatus.FAILED
            assert "cannot be decrypted" in lost.last_error
            assert receiver.requests == []
            with pytest.raises(CommandError, match="Nothing changed"):
                call_command("reencrypt_webhook_secrets", stdout=io.StringIO())

        with override_settings(SECRET_KEY=NEW_KEY, SECRET_KEY_FALLBACKS=[OLD_KEY]):  # rotating
            clock.advance(60)
            webhook_deliveries_run()
            assert [request.valid for request in receiver.requests] == [True]
            call_command("reencrypt_webhook_secrets", stdout=io.StringIO())

        with override_settings(SECRET_KEY=NEW_KEY, SECRET_KEY_FALLBACKS=[]):  # rotated
            assert decrypt(WebhookEndpoint.objects.get(pk=endpoint.pk).secret) == secret
            TaskFactory(project=project)
            webhook_deliveries_run()
            assert [request.valid for request in receiver.requests] == [True, True]

        with pytest.raises(SecretUnreadable):  # and the old key alone reads it no more
            decrypt(WebhookEndpoint.objects.get(pk=endpoint.pk).secret)


@pytest.mark.django_db
def test_a_secret_lost_with_its_key_is_replaced_by_rolling_it(clock):
    with running_receiver() as receiver:
        with override_settings(SECRET_KEY=OLD_KEY, SECRET_KEY_FALLBACKS=[]):
            endpoint, _ = webhook_create(url=receiver.url, event_types=[EventType.TASK_CREATED], actor=SYSTEM)
        TaskFactory(project=ProjectFactory())  # under the test key: the secret is lost
        webhook_deliveries_run()
        assert "cannot be decrypted" in WebhookDelivery.objects.get().last_error
        _, secret = webhook_roll_secret(endpoint=endpoint, actor=SYSTEM)
        receiver.secrets.append(secret)
        clock.advance(60)
        webhook_deliveries_run()
        assert [request.headers["Leasehold-Signature"].count("v1=") for request in receiver.delivered()] == [1]


BEFORE = [("push", "0001_initial")]


@pytest.mark.django_db(transaction=True)
def test_the_migration_encrypts_the_secrets_there_are_and_decrypts_them_going_back():
    latest = MigrationExecutor(connection).loader.graph.leaf_nodes()
    try:
        executor = MigrationExecutor(connection)
        executor.migrate(BEFORE)
        old = MigrationExecutor(connection).loader.project_state(BEFORE).apps
        old.get_model("push", "WebhookEndpoint").objects.create(
            url="https://hooks.example.org/x",
            secret="lhwh_" + "s" * 43,
            previous_secret="lhwh_" + "p" * 43,
            created_at=datetime(2026, 12, 1, tzinfo=UTC),
        )
        old.get_model("push", "WebhookEndpoint").objects.create(
            url="https://hooks.example.org/y", secret="lhwh_" + "t" * 43, created_at=datetime(2026, 12, 1, tzinfo=UTC)
        )
        MigrationExecutor(connection).migrate(latest)
        stored = _stored()
        assert [(decrypt(secret), decrypt(previous)) for secret, previous in stored] == [
            ("lhwh_" + "s" * 43, "lhwh_" + "p" * 43),
            ("lhwh_" + "t" * 43, ""),
        ]
        assert not any("lhwh_" in secret + previous for secret, previous in stored)
        MigrationExecutor(connection).migrate(BEFORE)
        assert _stored() == [("lhwh_" + "s" * 43, "lhwh_" + "p" * 43), ("lhwh_" + "t" * 43, "")]
    finally:
        MigrationExecutor(connection).migrate(latest)

"""Webhooks against hostile URLs and receivers (issue 27: M2, M3, L1, L2).

Every receiver here is a real socket server on 127.0.0.1 that misbehaves on
purpose: it trickles its answer a byte at a time, or answers with a body far
larger than anyone should read. Each stops on its own after a few seconds, so
a run that waits for it (the behaviour before the fix) ends, and fails, in
bounded time. The try's deadline is lowered to one second to keep them short.
"""

from __future__ import annotations

import io
import os
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.test import override_settings

from core.errors import ValidationFailed
from ledger.actors import SYSTEM
from ledger.models import EventType
from push import webhooks
from push.models import DeliveryStatus, WebhookDelivery, WebhookEndpoint
from push.services import deliveries as webhook_services
from push.services.deliveries import BACKOFF_SECONDS, MAX_TRIES, webhook_deliveries_run
from push.services.webhooks import webhook_create
from tests.factories import ProjectFactory, TaskFactory
from tests.webhook_receiver import running_receiver

pytestmark = pytest.mark.django_db

DEADLINE = 1.0
RECEIVER_GIVES_UP_AFTER = 8.0  # seconds: how long a misbehaving receiver keeps a connection


@pytest.fixture(autouse=True)
def short_deadline(monkeypatch):
    monkeypatch.setattr(webhooks, "TIMEOUT_SECONDS", DEADLINE)


@pytest.fixture
def receiver():
    with running_receiver() as running:
        yield running


@dataclass
class RawServer:
    """A socket server whose every connection is handed, request unread, to `answer(connection, server)`."""

    port: int = 0
    connections: int = 0
    bytes_sent: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def url(self, host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}/hook"

    def sent(self, count: int) -> None:
        with self.lock:
            self.bytes_sent += count


@contextmanager
def raw_server(answer, *, tls: ssl.SSLContext | None = None) -> Iterator[RawServer]:
    server = RawServer()
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.1)
    server.port = listener.getsockname()[1]
    stop = threading.Event()
    handlers: list[threading.Thread] = []

    def serve() -> None:
        while not stop.is_set():
            try:
                connection, _ = listener.accept()
            except TimeoutError:
                continue
            server.connections += 1
            handler = threading.Thread(target=_handle, args=(connection,), daemon=True)
            handlers.append(handler)
            handler.start()

    def _handle(connection: socket.socket) -> None:
        with connection:
            connection.settimeout(RECEIVER_GIVES_UP_AFTER)
            try:
                if tls is not None:
                    connection = tls.wrap_socket(connection, server_side=True)
                _read_request(connection)
                answer(connection, server, stop)
            except OSError:
                pass  # the client hung up: what a good client does

    accepting = threading.Thread(target=serve, daemon=True)
    accepting.start()
    try:
        yield server
    finally:
        stop.set()
        accepting.join(5)
        for handler in handlers:
            handler.join(RECEIVER_GIVES_UP_AFTER + 2)
        listener.close()


def _read_request(connection: socket.socket) -> bytes:
    """The whole request: its head, then as many bytes as its Content-Length says."""
    received = b""
    while b"\r\n\r\n" not in received:
        chunk = connection.recv(65536)
        if not chunk:
            return received
        received += chunk
    head, _, body = received.partition(b"\r\n\r\n")
    length = next(
        (int(line.split(b":", 1)[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")),
        0,
    )
    while len(body) < length:
        chunk = connection.recv(65536)
        if not chunk:
            break
        body += chunk
    return head + b"\r\n\r\n" + body


def trickle_headers(connection: socket.socket, server: RawServer, stop: threading.Event) -> None:
    """A status line, then one header byte every 0.2 s: every read succeeds, the answer never ends."""
    connection.sendall(b"HTTP/1.1 200 OK\r\n")
    ends_at = time.monotonic() + RECEIVER_GIVES_UP_AFTER
    while time.monotonic() < ends_at and not stop.is_set():
        connection.sendall(b"X")
        server.sent(1)
        time.sleep(0.2)


def huge_body(connection: socket.socket, server: RawServer, stop: threading.Event) -> None:
    """A 2xx announcing 64 MiB, then as much of it as the client will take."""
    size = 64 * 1024 * 1024
    connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n" % size)
    chunk = b"x" * 65536
    for _ in range(size // len(chunk)):
        if stop.is_set():
            return
        connection.sendall(chunk)
        server.sent(len(chunk))


def subscribe(receiver, **options):
    endpoint, secret = webhook_create(url=receiver.url, actor=SYSTEM, **options)
    receiver.secrets.append(secret)
    return endpoint


# M2: a URL the HTTP client cannot parse


@pytest.mark.parametrize("url", ["http://127.0.0.1:9/hook\r", "http://127.0.0.1:9/ho\x7fok", "http://127.0.0.1:9/\x00"])
def test_a_url_with_a_control_character_is_refused_at_creation(url):
    with pytest.raises(ValidationFailed, match="not a valid URL") as refused:
        webhook_create(url=url, actor=SYSTEM)
    assert refused.value.code == "VALIDATION_ERROR"
    assert refused.value.details == {"fields": {"url": ["invalid"]}}
    assert not WebhookEndpoint.objects.exists()


def test_create_webhook_refuses_a_url_read_from_a_file_with_crlf_line_ends():
    """`create_webhook "$(cat url.txt)"`: the shell strips the newline, not the carriage return."""
    with pytest.raises(CommandError, match=r"VALIDATION_ERROR: url is not a valid URL"):
        call_command("create_webhook", "http://127.0.0.1:9/hook\r", stdout=io.StringIO())
    assert not WebhookEndpoint.objects.exists()


def test_a_stored_url_the_client_cannot_post_to_is_a_failed_try_and_the_others_still_get_events(clock, receiver):
    broken, _ = webhook_create(url="http://127.0.0.1:9/hook", event_types=[EventType.TASK_CREATED], actor=SYSTEM)
    WebhookEndpoint.objects.filter(pk=broken.pk).update(url="http://127.0.0.1:9/hook\r")  # stored before the check
    good = subscribe(receiver, event_types=[EventType.TASK_CREATED])
    TaskFactory(project=ProjectFactory())
    run = webhook_deliveries_run()
    assert (run.tries, run.delivered, run.failed) == (2, 1, 1)
    assert len(receiver.delivered()) == 1
    failed = WebhookDelivery.objects.get(endpoint=broken)
    assert (failed.status, failed.attempts) == (DeliveryStatus.FAILED, 1)
    assert "not a valid URL" in failed.last_error
    broken.refresh_from_db()
    assert broken.consecutive_failures == 1  # counts toward disabling
    assert WebhookDelivery.objects.get(endpoint=good).status == DeliveryStatus.DELIVERED


# M3: slow and oversized answers


def test_a_trickled_answer_ends_at_the_try_deadline_and_is_recorded(clock):
    with raw_server(trickle_headers) as server:
        endpoint, _ = webhook_create(url=server.url(), event_types=[EventType.TASK_CREATED], actor=SYSTEM)
        TaskFactory(project=ProjectFactory())
        started = time.monotonic()
        run = webhook_deliveries_run()
        took = time.monotonic() - started
    assert run.failed == 1
    assert took < DEADLINE + 2.0
    delivery = WebhookDelivery.objects.get(endpoint=endpoint)
    assert (delivery.status, delivery.attempts) == (DeliveryStatus.FAILED, 1)
    assert "Timeout" in delivery.last_error
    assert delivery.next_attempt_at == clock.now() + timedelta(seconds=BACKOFF_SECONDS[0])


def test_a_huge_answer_is_not_read(clock):
    with raw_server(huge_body) as server:
        endpoint, _ = webhook_create(url=server.url(), event_types=[EventType.TASK_CREATED], actor=SYSTEM)
        TaskFactory(project=ProjectFactory())
        started = time.monotonic()
        run = webhook_deliveries_run()
        took = time.monotonic() - started
    assert run.delivered == 1
    assert took < DEADLINE + 1.0
    assert server.bytes_sent < 16 * 1024 * 1024  # what the socket buffers took before the client hung up
    assert WebhookDelivery.objects.get(endpoint=endpoint).status == DeliveryStatus.DELIVERED


def test_a_slow_receiver_does_not_hold_up_the_other_endpoints(clock, receiver):
    with raw_server(trickle_headers) as server:
        webhook_create(url=server.url(), event_types=[EventType.TASK_CREATED], actor=SYSTEM)  # the first endpoint
        subscribe(receiver, event_types=[EventType.TASK_CREATED])
        project = ProjectFactory()
        for _ in range(3):
            TaskFactory(project=project)
        started = time.monotonic()
        run = webhook_deliveries_run()
    assert run.delivered == 3
    first = min(request.at for request in receiver.delivered())
    assert first - started < DEADLINE / 2  # posted alongside the slow one, not after it
    assert server.connections == 1  # one failed try, then its backoff


def test_a_try_cut_off_by_a_killed_job_is_counted_and_not_posted_again_at_once(clock, receiver, monkeypatch):
    endpoint = subscribe(receiver, event_types=[EventType.TASK_CREATED])
    TaskFactory(project=ProjectFactory())

    def killed(**kwargs):
        raise SystemExit("django-q's timeout")

    monkeypatch.setattr(webhooks, "post", killed)
    with pytest.raises(SystemExit):
        webhook_deliveries_run()
    delivery = WebhookDelivery.objects.get()
    assert (delivery.status, delivery.attempts) == (DeliveryStatus.FAILED, 1)
    assert delivery.next_attempt_at > clock.now()
    assert "interrupted" in delivery.last_error
    endpoint.refresh_from_db()
    assert endpoint.consecutive_failures == 1
    monkeypatch.undo()
    monkeypatch.setattr(webhooks, "TIMEOUT_SECONDS", DEADLINE)
    clock.advance(31)
    webhook_deliveries_run()  # the claim lapsed and the backoff passed: tried again, counted
    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts) == (DeliveryStatus.DELIVERED, 2)
    endpoint.refresh_from_db()
    assert endpoint.consecutive_failures == 0


@pytest.mark.django_db(transaction=True)
def test_a_delivery_process_killed_mid_post_leaves_the_try_counted(tmp_path):
    """The real thing: another process posts to a trickling receiver and gets SIGKILL in the middle."""
    with raw_server(trickle_headers) as server:
        endpoint, _ = webhook_create(url=server.url(), event_types=[EventType.TASK_CREATED], actor=SYSTEM)
        TaskFactory(project=ProjectFactory())
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "tests.qcluster_settings",
            "LEASEHOLD_QCLUSTER_TEST_DB": str(connection.settings_dict["NAME"]),
            "PYTHONDONTWRITEBYTECODE": "1",
        }
        code = "from push.services.deliveries import webhook_deliveries_run; webhook_deliveries_run()"
        log_path = tmp_path / "run.log"
        with log_path.open("wb") as log:
            delivering = subprocess.Popen(
                [sys.executable, "manage.py", "shell", "-c", code], env=env, stdout=log, stderr=subprocess.STDOUT
            )
        try:
            waited_until = time.monotonic() + 30
            while server.connections == 0 and time.monotonic() < waited_until and delivering.poll() is None:
                time.sleep(0.05)
            assert server.connections == 1, log_path.read_text()
            time.sleep(0.3)  # mid-answer: the receiver is trickling its headers
        finally:
            delivering.kill()
            delivering.wait(10)
    delivery = WebhookDelivery.objects.get(endpoint=endpoint)
    assert (delivery.status, delivery.attempts) == (DeliveryStatus.FAILED, 1)
    assert "interrupted" in delivery.last_error
    assert delivery.next_attempt_at > delivery.created_at
    endpoint.refresh_from_db()
    assert endpoint.consecutive_failures == 1


def test_a_last_try_cut_off_leaves_the_delivery_dead_without_a_ninth_post(clock, receiver, monkeypatch):
    subscribe(receiver, event_types=[EventType.TASK_CREATED])
    TaskFactory(project=ProjectFactory())
    WebhookDelivery.objects.update(attempts=MAX_TRIES - 1)
    monkeypatch.setattr(webhooks, "post", lambda **kwargs: (_ for _ in ()).throw(SystemExit("killed")))
    with pytest.raises(SystemExit):
        webhook_deliveries_run()
    monkeypatch.undo()
    clock.advance(webhook_services.CLAIM_SECONDS + 1)
    assert webhook_deliveries_run().tries == 0
    delivery = WebhookDelivery.objects.get()
    assert (delivery.status, delivery.attempts) == (DeliveryStatus.DEAD, MAX_TRIES)
    assert receiver.requests == []


# L1: the connection goes to the address that was checked


@override_settings(LEASEHOLD_WEBHOOK_ALLOW_PRIVATE=False)
def test_the_post_connects_to_the_checked_address_with_the_host_name_kept(clock, receiver, monkeypatch):
    """DNS rebinding: the name answers an allowed address to each check and another one to any later look-up.

    127.0.0.1 stands for a public address here (the receiver must be local);
    127.0.0.2, where nothing listens, for the private one the name moves to.
    """
    real_getaddrinfo = socket.getaddrinfo
    answers = ["127.0.0.1"]

    def rebinding(host, port, *args, **kwargs):
        if host != "hooks.rebind.test":
            return real_getaddrinfo(host, port, *args, **kwargs)
        return real_getaddrinfo(answers.pop(0) if answers else "127.0.0.2", port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", rebinding)
    monkeypatch.setattr(webhooks, "_refused_address", lambda address: address != "127.0.0.1")
    port = receiver.server.server_address[1]
    endpoint, secret = webhook_create(url=f"http://hooks.rebind.test:{port}/hook", actor=SYSTEM)
    receiver.secrets.append(secret)
    answers.append("127.0.0.1")  # for the try's own check
    run = webhook_deliveries_run()
    assert run.delivered == 1, WebhookDelivery.objects.get(endpoint=endpoint).last_error
    (got,) = receiver.requests
    assert got.headers["Host"] == f"hooks.rebind.test:{port}"


def _certificate_for(name: str, directory) -> tuple[str, str]:
    """A self-signed certificate for `name` (and its key), as PEM files."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.now(UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(hours=1))
        .not_valid_after(now + timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return str(cert_path), str(key_path)


@override_settings(LEASEHOLD_WEBHOOK_ALLOW_PRIVATE=False)
def test_over_https_the_pinned_connection_sends_the_host_name_as_sni_and_verifies_it(clock, monkeypatch, tmp_path):
    name = "hooks.rebind.test"
    cert, key = _certificate_for(name, tmp_path)
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(cert, key)
    seen: dict[str, object] = {}

    def remember_sni(sock, server_name, context):
        seen["sni"] = server_name

    server_context.sni_callback = remember_sni

    def answer(connection, server, stop):
        connection.sendall(b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n")

    client_context = ssl.create_default_context(cafile=cert)
    monkeypatch.setattr(webhooks, "_ssl_context", lambda: client_context)
    real_getaddrinfo = socket.getaddrinfo

    def rebinding(host, port, *args, **kwargs):
        if host == name:  # 127.0.0.1 (standing for a public address) once, then nowhere
            host = "127.0.0.2" if seen.get("resolved") else "127.0.0.1"
            seen["resolved"] = True
        return real_getaddrinfo(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", rebinding)
    monkeypatch.setattr(webhooks, "_refused_address", lambda address: address != "127.0.0.1")
    with raw_server(answer, tls=server_context) as server:
        result = webhooks.post(url=f"https://{name}:{server.port}/hook", body=b"{}", event_id=1, signature="t=0")
    assert (result.delivered, result.status_code) == (True, 204), result.error
    assert seen["sni"] == name


# L2: IPv6 addresses that carry a refused IPv4


@override_settings(LEASEHOLD_WEBHOOK_ALLOW_PRIVATE=False)
@pytest.mark.parametrize(
    "address",
    [
        "2002:7f00:1::1",  # 6to4 of 127.0.0.1
        "2002:a9fe:a9fe::1",  # 6to4 of 169.254.169.254
        "2002:a00:1::",  # 6to4 of 10.0.0.1
        "2001:0:4136:e378:8000:63bf:80ff:fffe",  # Teredo, client 127.0.0.1
        "::ffff:169.254.169.254",  # IPv4-mapped
        "::127.0.0.1",  # IPv4-compatible
        "64:ff9b::a9fe:a9fe",  # NAT64 of 169.254.169.254
    ],
)
def test_ipv6_addresses_carrying_a_refused_ipv4_are_refused(address):
    with pytest.raises(ValidationFailed, match="LEASEHOLD_WEBHOOK_ALLOW_PRIVATE"):
        webhook_create(url=f"http://[{address}]/hook", actor=SYSTEM)


@override_settings(LEASEHOLD_WEBHOOK_ALLOW_PRIVATE=False)
def test_a_6to4_address_of_a_public_ipv4_is_accepted():
    target = webhooks.resolve_target("http://[2002:808:808::1]/hook")
    assert target.address == "2002:808:808::1"

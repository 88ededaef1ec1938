"""Bug 12: detail pages showed `Dec. 1, 2026, 7:29 a.m.`; every page shows exact UTC timestamps to the second."""

from __future__ import annotations

import pytest

from ledger.models import Event

pytestmark = pytest.mark.django_db


def test_detail_pages_show_utc_to_the_second(ops_client, fleet, clock):
    clock.advance(4.5)
    event = Event.objects.filter(task=fleet.held).order_by("id").first()
    assert event is not None
    body = ops_client.get(f"/admin/ledger/event/{event.pk}/change/").content.decode()
    stamp = event.created_at.strftime("%Y-%m-%d %H:%M:%S")
    assert f"{stamp} UTC" in body
    assert "a.m." not in body
    assert "p.m." not in body
    body = ops_client.get(f"/admin/ledger/agent/{fleet.holder.pk}/change/").content.decode()
    assert fleet.holder.created_at.strftime("%Y-%m-%d %H:%M:%S UTC") in body
    assert "a.m." not in body

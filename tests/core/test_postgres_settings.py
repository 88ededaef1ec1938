"""`core.db.postgres_settings`: planner settings for the statements of a block, never beyond it."""

from __future__ import annotations

import pytest
from django.db import connection, transaction

from core.db import postgres_settings

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's settings"),
]


def _setting(name: str) -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_setting(%s)", [name])
        return cursor.fetchone()[0]


def test_the_settings_hold_inside_the_block_and_the_values_before_come_back_after_it():
    with transaction.atomic():
        before = _setting("enable_incremental_sort"), _setting("jit")
        with postgres_settings({"enable_incremental_sort": "off", "jit": "off"}):
            assert (_setting("enable_incremental_sort"), _setting("jit")) == ("off", "off")
        assert (_setting("enable_incremental_sort"), _setting("jit")) == before


def test_no_settings_run_no_statement():
    from django.test.utils import CaptureQueriesContext

    with transaction.atomic(), CaptureQueriesContext(connection) as queries, postgres_settings({}):
        pass
    assert queries.captured_queries == []

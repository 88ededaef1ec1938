from __future__ import annotations

from django.apps import AppConfig


class InsightConfig(AppConfig):
    name = "insight"
    verbose_name = "Insight"

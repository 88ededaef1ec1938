from __future__ import annotations

from django.apps import AppConfig


class EnvironmentsConfig(AppConfig):
    name = "environments"

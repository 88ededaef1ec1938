from __future__ import annotations

from django.apps import AppConfig


class PushConfig(AppConfig):
    name = "push"
    verbose_name = "Push"

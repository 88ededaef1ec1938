"""The console: the admin control plane, a door-only app (no models).

Every model's admin is registered from `console.admin`, which Django's admin
autodiscovery imports; the models keep their app labels, so admin URLs are
`/admin/<app label>/<model>/` as before.
"""

from __future__ import annotations

from django.apps import AppConfig


class ConsoleConfig(AppConfig):
    name = "console"
    verbose_name = "Console"

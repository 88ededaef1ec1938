from __future__ import annotations

import secrets
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandParser


class Command(BaseCommand):
    help = (
        "On a first local run, create a superuser with a generated password and print it once. "
        "Does nothing when a superuser exists."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--username", default="admin")
        parser.add_argument("--login-url", default="", help="where to log in: named in the one line printed")

    def handle(self, *args: Any, **options: Any) -> None:
        User = get_user_model()
        where = f" at {options['login_url']}" if options["login_url"] else ""
        existing = User.objects.filter(is_superuser=True).order_by("pk").first()
        if existing is not None:
            # A restart: the password was shown once, on the first run; never a second, contradicting hint.
            self.stdout.write(
                f"Log in{where} as {existing.get_username()!r} with the password shown on the first run "
                f"(forgotten: manage.py changepassword {existing.get_username()})."
            )
            return
        password = secrets.token_urlsafe(12)
        User.objects.create_superuser(username=options["username"], email="", password=password)
        self.stdout.write(
            f"Log in{where} as {options['username']!r} with password {password} (shown once; change it with "
            f"manage.py changepassword {options['username']})."
        )

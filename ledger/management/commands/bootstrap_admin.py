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

    def handle(self, *args: Any, **options: Any) -> None:
        User = get_user_model()
        if User.objects.filter(is_superuser=True).exists():
            self.stdout.write("An admin user exists; log in with its password (manage.py changepassword to reset).")
            return
        password = secrets.token_urlsafe(12)
        User.objects.create_superuser(username=options["username"], email="", password=password)
        self.stdout.write(f"Created admin user {options['username']!r} with password: {password}")
        self.stdout.write("This password is shown once. Change it with: manage.py changepassword admin")

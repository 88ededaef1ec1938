"""WSGI entry point, served by gunicorn through `manage.py serve`.

The handler is Django's, or with `LEASEHOLD_LEAN_PATH` on (the default) its
subclass that serves the agent cycle's hot writes below the middleware stack
(`api.lean`, named by string: config/ imports no app).
"""

from __future__ import annotations

import os

import django
from django.utils.module_loading import import_string

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.base")

django.setup(set_prefix=False)
application = import_string("api.lean.wsgi_application")()

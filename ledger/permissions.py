"""The two groups of SPEC §10 and their permissions.

Migration `ledger.0003` creates the groups; this `post_migrate` hook gives
them their permissions after every migrate, because Django creates the
permissions of newly added models only at the end of a migrate run. No group
ever gets a delete permission on a Leasehold model.
"""

from __future__ import annotations

from typing import Any

LEDGER_ADMINS = "Ledger admins"
MANAGERS = "Managers"
LEASEHOLD_APPS = ("ledger", "environments", "leases", "reconciliation", "insight", "push", "runners")


def sync_group_permissions(sender: Any = None, **kwargs: Any) -> None:
    from django.contrib.auth.models import Group, Permission

    using = kwargs.get("using", "default")
    permissions = Permission.objects.using(using).filter(content_type__app_label__in=LEASEHOLD_APPS)
    admins, _ = Group.objects.using(using).get_or_create(name=LEDGER_ADMINS)
    managers, _ = Group.objects.using(using).get_or_create(name=MANAGERS)
    # django-q2's failed tasks, read-only (issue 32: a job killed at its timeout is found there).
    failures = Permission.objects.using(using).filter(content_type__app_label="django_q", codename="view_failure")
    admins.permissions.set([*permissions.exclude(codename__startswith="delete_"), *failures])
    managers.permissions.set(permissions.filter(codename__startswith="view_"))


def may_view(user: Any, *models: Any) -> bool:
    """The one permission rule for every aggregate (issue 32): a panel, report, export, health page
    or metrics scrape shows its figures only to a user who may view every model they are read from.

    "May view" is Django's: the model's `view_` or `change_` permission (a change implies a view, as
    in the admin). A superuser holds every permission; an inactive user none.
    """
    if user is None or not getattr(user, "is_active", False):
        return False
    return all(
        user.has_perm(f"{model._meta.app_label}.view_{model._meta.model_name}")
        or user.has_perm(f"{model._meta.app_label}.change_{model._meta.model_name}")
        for model in models
    )

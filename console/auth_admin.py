"""No deletes for anyone, superusers included (bug 11): users, the role groups and django-q2's schedules.

django-q2's failed tasks are shown read-only, to superusers and to `Ledger admins` (who hold
`django_q.view_failure`, `ledger.permissions.sync_group_permissions`): a job killed at its timeout is there.

Django's own admins for users and groups, and django-q2's for schedules,
would let a superuser delete the `Ledger admins` / `Managers` groups, a user
(whose events name them), or `leases.sweep_expired` (sweeping would silently
stop). They are registered again here with:

- no delete permission for anyone (`delete_selected` is off site-wide);
- no `delete_*` permission offered on the group and user forms, so one cannot
  be given (and none would have effect: every Leasehold admin refuses delete);
- the role groups' names read-only (`ledger.permissions` finds them by name);
- schedules entirely read-only: they are created and updated by
  `operations.schedules.ensure_schedules` after every migrate, so a change made
  here would be undone by the next migrate anyway. Nobody adds, changes or
  deletes one in the admin; the list shows them, for reading.

Users are deactivated instead of deleted: untick "Active" on the user's page.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import GroupAdmin, UserAdmin
from django.contrib.auth.models import Group, Permission
from django.forms import ModelMultipleChoiceField
from django.http import HttpRequest
from django_q.admin import FailAdmin, ScheduleAdmin
from django_q.models import Failure, Schedule

from ledger.permissions import LEDGER_ADMINS, MANAGERS

ROLE_GROUPS = (LEDGER_ADMINS, MANAGERS)


def _without_delete_permissions(field: Any) -> Any:
    queryset = getattr(field, "queryset", None)
    if isinstance(field, ModelMultipleChoiceField) and queryset is not None and queryset.model is Permission:
        field.queryset = queryset.exclude(codename__startswith="delete_")
        field.help_text = (field.help_text or "") + " Delete permissions are not offered: nothing is deleted here."
    return field


class NoDeleteGroupAdmin(GroupAdmin):
    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        if obj is not None and obj.name in ROLE_GROUPS:
            return ("name",)
        return super().get_readonly_fields(request, obj)

    def formfield_for_manytomany(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        return _without_delete_permissions(super().formfield_for_manytomany(db_field, request, **kwargs))


class NoDeleteUserAdmin(UserAdmin):
    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def formfield_for_manytomany(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        return _without_delete_permissions(super().formfield_for_manytomany(db_field, request, **kwargs))


class ReadOnlyScheduleAdmin(ScheduleAdmin):
    actions: Any = ()

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class ReadOnlyFailureAdmin(FailAdmin):
    """django-q2's failed tasks, read-only: no retry (a retry runs a job outside its schedule), no delete."""

    actions: Any = ()

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


def install_no_delete_admins(site: admin.AdminSite) -> None:
    """Replace the stock admins of users, groups and schedules on `site` with the no-delete ones."""
    user_model = get_user_model()
    for model, model_admin in (
        (Group, NoDeleteGroupAdmin),
        (user_model, NoDeleteUserAdmin),
        (Schedule, ReadOnlyScheduleAdmin),
        (Failure, ReadOnlyFailureAdmin),
    ):
        if site.is_registered(model):
            site.unregister(model)
        site.register(model, model_admin)

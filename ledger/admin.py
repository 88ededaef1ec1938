"""Admin for the ledger's models. Writes go through `ledger.services`; nothing is deletable."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from ledger.models import Agent, Event, Project, Task, TaskDependency

admin.site.disable_action("delete_selected")
admin.site.site_header = "Leasehold"
admin.site.site_title = "Leasehold"
admin.site.index_title = "Fleet"


class NoDeleteAdmin(admin.ModelAdmin):
    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class ReadOnlyAdmin(NoDeleteAdmin):
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Project)
class ProjectAdmin(ReadOnlyAdmin):
    list_display = ["slug", "name", "key_prefix", "repository", "default_lease_seconds", "archived_at"]
    search_fields = ["slug", "name"]


@admin.register(Task)
class TaskAdmin(ReadOnlyAdmin):
    list_display = ["key", "title", "project", "status", "priority", "task_class", "version", "epoch"]
    list_filter = ["project", "status", "task_class"]
    search_fields = ["key", "title"]
    list_select_related = ["project"]


@admin.register(TaskDependency)
class TaskDependencyAdmin(ReadOnlyAdmin):
    list_display = ["task", "blocked_by", "created_at", "removed_at"]
    list_select_related = ["task", "blocked_by"]


@admin.register(Agent)
class AgentAdmin(ReadOnlyAdmin):
    list_display = ["handle", "kind", "is_active", "last_seen_at", "created_at"]
    list_filter = ["kind", "is_active"]
    search_fields = ["handle"]
    exclude = ["token_hash"]


@admin.register(Event)
class EventAdmin(ReadOnlyAdmin):
    list_display = ["id", "created_at", "type", "severity", "project", "task", "actor_agent", "actor_user"]
    list_filter = ["severity", "type"]
    list_select_related = ["project", "task", "actor_agent", "actor_user"]
    show_full_result_count = False

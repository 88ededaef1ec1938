"""Comments on the task page (SPEC §16.2): an inline of the task's comments, newest first.

Read-only here: comments are added through `ledger.services.comment_add` (the API, the CLI, MCP);
they are never edited or deleted.
"""

from __future__ import annotations

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from console.base import ReadOnlyInline, moment
from ledger.models import TaskComment


class CommentInline(ReadOnlyInline):
    model = TaskComment
    fk_name = "task"
    verbose_name_plural = "Comments (newest first)"
    readonly_fields = ("author", "written", "body")
    fields = readonly_fields
    ordering = ["-id"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[TaskComment]:
        return super().get_queryset(request).select_related("author_agent", "author_user")

    @admin.display(description="author")
    def author(self, comment: TaskComment) -> str:
        return comment.author_label

    @admin.display(description="written")
    def written(self, comment: TaskComment) -> str:
        return moment(comment.created_at)

"""FilterSets of the task list (`GET /api/v1/tasks/`), over tasks annotated with lease state."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import django_filters  # type: ignore[import-untyped]
from django.db.models import F, JSONField, Q, QuerySet, Value

from core.json_sets import JsonArrayWithin
from leases.selectors import EFFECTIVE_STATUSES, claimable_tasks
from ledger.label_sets import parse_label_list, validate_label_set
from ledger.models import Agent, Task, TaskStatus
from ledger.selectors import project_by_slug, projects_visible_to

BOOLEAN_CHOICES = [("true", "true"), ("false", "false")]


class ChoiceInFilter(django_filters.BaseInFilter, django_filters.ChoiceFilter):
    """`?status=ready,open`: comma-separated, each value one of the choices."""


class TaskFilter(django_filters.FilterSet):
    """Filters of the compact task list.

    The queryset must carry `with_lease_state` annotations (`effective_status`
    is filtered on). `claimable` asks `leases.selectors.claimable_tasks`, per
    project, so the list agrees with what a claim would decide.
    """

    project = django_filters.CharFilter(method="filter_project", max_length=50)
    status = ChoiceInFilter(field_name="status", choices=TaskStatus.choices)
    effective_status = ChoiceInFilter(
        field_name="effective_status", choices=[(status, status) for status in EFFECTIVE_STATUSES]
    )
    task_class = django_filters.CharFilter(field_name="task_class", max_length=64)
    claimable = django_filters.ChoiceFilter(method="filter_claimable", choices=BOOLEAN_CHOICES)
    q = django_filters.CharFilter(field_name="title", lookup_expr="icontains", max_length=200)
    requires = django_filters.CharFilter(method="filter_requires", max_length=1300)

    class Meta:
        model = Task
        fields: list[str] = []

    def __init__(self, data: Any, queryset: QuerySet[Task], *, agent: Agent | None, now: datetime) -> None:
        super().__init__(data=data, queryset=queryset)
        self.agent = agent
        self.now = now

    def filter_project(self, queryset: QuerySet[Task], name: str, value: str) -> QuerySet[Task]:
        return queryset.filter(project=project_by_slug(value, agent=self.agent))

    def filter_claimable(self, queryset: QuerySet[Task], name: str, value: str) -> QuerySet[Task]:
        slug = self.form.cleaned_data.get("project")
        projects = [project_by_slug(slug, agent=self.agent)] if slug else list(projects_visible_to(self.agent))
        claimable = Q(pk__in=[])
        for project in projects:
            claimable |= Q(pk__in=claimable_tasks(project=project, now=self.now, agent=self.agent).values("pk"))
        return queryset.filter(claimable) if value == "true" else queryset.exclude(claimable)

    def filter_requires(self, queryset: QuerySet[Task], name: str, value: str) -> QuerySet[Task]:
        """Tasks whose `requires` hold every label of `value` (comma-separated; SPEC §23.1)."""
        labels = validate_label_set(parse_label_list(value), field="requires")
        if not labels:
            return queryset
        return queryset.filter(JsonArrayWithin(Value(labels, output_field=JSONField()), F("requires")))

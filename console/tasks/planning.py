"""Planning on the task page: edit the task's own fields, its dependencies and reservation; status buttons; the queue.

Every write goes through the service every other door uses:
`leases.services.task_update` (lease-aware; the edit names the version it
was made on, and a stale one is refused with `VERSION_CONFLICT`, shown as a
message, nothing saved), `ledger.services.dependency_add` /
`dependency_remove` (a cycle is refused with its path),
`ledger.services.task_reservation_clear`, `leases.services.task_cancel`.
`TaskPlanningMixin` is mixed into `console.tasks.tasks.TaskAdmin`, which supplies
`get_queryset`, `has_operate_permission`, `log_change` and `_set_status`.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.db.models import Exists, OuterRef
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse

from console.base import EMPTY, actor_of, badge, duration, moment
from console.tasks.parts import EFFECTIVE_LABELS, claimability_cell, status_cell
from core.errors import DependencyCycle, LedgerError, ValidationFailed, VersionConflict
from core.text import normalise_newlines
from leases.selectors import HOLDS_SET, IN_PROGRESS, claimable_tasks, live_attempts, with_compact_state
from leases.services import task_update
from ledger import clock
from ledger.label_sets import parse_label_list, validate_label_set
from ledger.models import ALLOWED_TRANSITIONS, RESOLVED_STATUSES, Project, Task, TaskDependency, TaskStatus
from ledger.services import dependency_add, dependency_remove, task_reservation_clear

INT32_MAX = 2**31 - 1
LABELS_MAX = 50
LABEL_MAX_CHARS = 64
QUEUE_SHOWN = 200
EDITABLE_FIELDS = ("title", "description", "acceptance_criteria", "priority", "task_class", "labels", "requires")


class TaskPlanningForm(forms.Form):
    """The task's own fields an admin plans with; `edited_version` is the version the form was opened on."""

    edited_version = forms.IntegerField(widget=forms.HiddenInput, min_value=1)
    title = forms.CharField(max_length=300, widget=forms.TextInput(attrs={"class": "vTextField"}))
    description = forms.CharField(
        required=False, strip=False, widget=forms.Textarea(attrs={"rows": 8, "class": "vLargeTextField"})
    )
    acceptance_criteria = forms.CharField(
        required=False, strip=False, widget=forms.Textarea(attrs={"rows": 5, "class": "vLargeTextField"})
    )
    priority = forms.IntegerField(min_value=-(2**31), max_value=INT32_MAX, help_text="Higher is claimed first.")
    task_class = forms.SlugField(max_length=64, required=False, help_text="Drives lease sizing, e.g. migration.")
    labels = forms.CharField(required=False, max_length=4000, help_text="Comma-separated tags.")
    requires = forms.CharField(
        required=False,
        max_length=2000,
        help_text="Comma-separated labels a claimer must carry, e.g. gpu, cuda (SPEC §23.1); empty: any agent.",
    )

    def clean_description(self) -> str:
        return str(normalise_newlines(self.cleaned_data.get("description", "")))

    def clean_acceptance_criteria(self) -> str:
        return str(normalise_newlines(self.cleaned_data.get("acceptance_criteria", "")))

    def clean_labels(self) -> list[str]:
        labels = [label.strip() for label in self.cleaned_data.get("labels", "").split(",") if label.strip()]
        if len(labels) > LABELS_MAX:
            raise forms.ValidationError(f"At most {LABELS_MAX} labels.")
        too_long = [label for label in labels if len(label) > LABEL_MAX_CHARS]
        if too_long:
            raise forms.ValidationError(f"A label is at most {LABEL_MAX_CHARS} characters: {too_long[0][:80]}…")
        return list(dict.fromkeys(labels))

    def clean_requires(self) -> list[str]:
        try:
            return validate_label_set(parse_label_list(self.cleaned_data.get("requires", "")), field="requires")
        except ValidationFailed as refused:
            raise forms.ValidationError(refused.message) from None

    @classmethod
    def initial_for(cls, task: Task) -> dict[str, Any]:
        initial: dict[str, Any] = {name: getattr(task, name) for name in EDITABLE_FIELDS}
        initial["labels"] = ", ".join(task.labels or [])
        initial["requires"] = ", ".join(task.requires or [])
        initial["edited_version"] = task.version
        return initial


class DependencyForm(forms.Form):
    blocked_by = forms.CharField(max_length=24, label="Blocked by (task key)")


def _refusal_text(error: LedgerError) -> str:
    if isinstance(error, DependencyCycle):
        path_keys = error.details.get("path") if isinstance(error.details, dict) else None
        if path_keys:
            return f"{error.message} The cycle: {' → '.join(map(str, path_keys))}."
    return error.message


class TaskPlanningMixin:
    """The per-task planning pages of TaskAdmin (see the module docstring)."""

    admin_site: Any
    get_queryset: Any
    has_operate_permission: Any
    log_change: Any
    message_user: Any
    _set_status: Any

    def planning_urls(self) -> list[URLPattern]:
        wrap = self.admin_site.admin_view
        return [
            path("queue/", wrap(self.queue_view), name="ledger_task_queue_index"),
            path("queue/<slug:slug>/", wrap(self.queue_view), name="ledger_task_queue"),
            path("<path:object_id>/edit/", wrap(self.edit_view), name="ledger_task_edit"),
            path("<path:object_id>/dependencies/add/", wrap(self.dependency_add_view), name="ledger_task_dep_add"),
            path(
                "<path:object_id>/dependencies/remove/",
                wrap(self.dependency_remove_view),
                name="ledger_task_dep_remove",
            ),
            path(
                "<path:object_id>/reservation/clear/",
                wrap(self.reservation_clear_view),
                name="ledger_task_reservation_clear",
            ),
            path("<path:object_id>/status/<slug:target>/", wrap(self.status_view), name="ledger_task_status"),
        ]

    def _operated_task(self, request: HttpRequest, object_id: str) -> Task:
        if not self.has_operate_permission(request):
            raise PermissionDenied
        task: Task = get_object_or_404(self.get_queryset(request).select_related("reserved_for"), pk=object_id)
        return task

    @staticmethod
    def _task_url(task: Task) -> str:
        return reverse("admin:ledger_task_change", args=[task.pk])

    # --- editing the task's own fields ------------------------------------------

    def edit_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        task = self._operated_task(request, object_id)
        form = TaskPlanningForm(request.POST or None, initial=TaskPlanningForm.initial_for(task))
        if request.method == "POST" and form.is_valid():
            data = form.cleaned_data
            # A textarea comes back with CRLF line endings: compared as stored, an untouched text is no change.
            changes = {
                name: data[name] for name in EDITABLE_FIELDS if data[name] != normalise_newlines(getattr(task, name))
            }
            try:
                result = task_update(
                    task=task, actor=actor_of(request), changes=changes, expected_version=data["edited_version"]
                )
            except VersionConflict as conflict:
                current = conflict.details.get("current_version") if isinstance(conflict.details, dict) else None
                form.add_error(
                    None,
                    f"{task.key} changed since you opened this page: you edited version "
                    f"{data['edited_version']}, it is now version {current}. Nothing was saved. "
                    "Open the task again to see what changed, then make your edit on the current version.",
                )
            except LedgerError as refused:
                fields = refused.details.get("fields") if isinstance(refused.details, dict) else None
                named = [name for name in (fields or {}) if name in form.fields]
                form.add_error(named[0] if len(named) == 1 else None, refused.message)
            else:
                if result.changed:
                    changed = ", ".join(sorted(result.changed))
                    self.log_change(request, result.task, f"Edited {changed} (version {result.task.version}).")
                    self.message_user(
                        request, f"Saved {task.key}: {changed} (now version {result.task.version}).", messages.SUCCESS
                    )
                else:
                    self.message_user(request, f"Nothing to save: {task.key} is as you left it.", messages.INFO)
                return HttpResponseRedirect(self._task_url(task))
        opts = Task._meta
        context = {
            **self.admin_site.each_context(request),
            "title": f"Edit {task.key}",
            "subtitle": task.title,
            "opts": opts,
            "original": task,
            "form": form,
            "edited_version": form["edited_version"].value(),
            "holder": getattr(task, "holder_handle", None),
            "task_url": self._task_url(task),
            "media": form.media,
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(request, "admin/ledger/task/edit_form.html", context)

    # --- dependencies, reservation, status buttons -------------------------------

    def dependency_add_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        return self._dependency_change(request, object_id, add=True)

    def dependency_remove_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        return self._dependency_change(request, object_id, add=False)

    def _dependency_change(self, request: HttpRequest, object_id: str, *, add: bool) -> HttpResponse:
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        task = self._operated_task(request, object_id)
        form = DependencyForm(request.POST)
        if not form.is_valid():
            self.message_user(request, "Give the key of the task it waits for, e.g. WEB-12.", messages.ERROR)
            return HttpResponseRedirect(self._task_url(task))
        key = form.cleaned_data["blocked_by"].strip().upper()
        other = Task.objects.filter(key=key).first()
        if other is None:
            self.message_user(request, f"No task {key}: nothing was changed.", messages.ERROR)
            return HttpResponseRedirect(self._task_url(task))
        actor = actor_of(request)
        try:
            if add:
                present = TaskDependency.objects.filter(task=task, blocked_by=other, removed_at__isnull=True).exists()
                dependency_add(task=task, blocked_by=other, actor=actor)
                changed = not present
            else:
                changed = dependency_remove(task=task, blocked_by=other, actor=actor)
        except LedgerError as refused:
            self.message_user(request, f"Not changed: {_refusal_text(refused)}", messages.ERROR)
            return HttpResponseRedirect(self._task_url(task))
        if not changed:
            state = "already waits for" if add else "does not wait for"
            self.message_user(request, f"{task.key} {state} {other.key}: nothing changed.", messages.INFO)
        else:
            verb = "now waits for" if add else "no longer waits for"
            self.log_change(request, task, f"{task.key} {verb} {other.key}.")
            self.message_user(request, f"{task.key} {verb} {other.key}.", messages.SUCCESS)
        return HttpResponseRedirect(self._task_url(task))

    def reservation_clear_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        task = self._operated_task(request, object_id)
        previous = task.reserved_for.handle if task.reserved_for else None
        if previous is None:
            self.message_user(request, f"{task.key} is not reserved: nothing changed.", messages.INFO)
            return HttpResponseRedirect(self._task_url(task))
        cleared = task_reservation_clear(task=task, actor=actor_of(request), reason="cleared in the admin")
        self.log_change(request, cleared, f"Cleared the reservation for {previous}.")
        self.message_user(
            request, f"{task.key} is no longer reserved for {previous}: any agent of the project may claim it."
        )
        return HttpResponseRedirect(self._task_url(task))

    def status_view(self, request: HttpRequest, object_id: str, target: str) -> HttpResponse:
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        task = self._operated_task(request, object_id)
        reopened = {TaskStatus.DONE: TaskStatus.READY, TaskStatus.CANCELLED: TaskStatus.OPEN}
        targets: dict[str, tuple[str, Any]] = {
            "ready": ("marked ready", lambda t: TaskStatus.READY),
            "open": ("moved to open", lambda t: TaskStatus.OPEN),
            "reopen": ("reopened", lambda t: reopened.get(t.status)),
        }
        if target not in targets:
            raise Http404(f"No status action {target!r}.")
        verb, choose = targets[target]
        self._set_status(request, self.get_queryset(request).filter(pk=task.pk), verb=verb, target=choose)
        return HttpResponseRedirect(self._task_url(task))

    # --- the per-project queue -------------------------------------------------

    def queue_view(self, request: HttpRequest, slug: str | None = None) -> HttpResponse:
        projects = list(Project.objects.filter(archived_at__isnull=True).order_by("slug"))
        if slug is None and len(projects) == 1:
            return HttpResponseRedirect(reverse("admin:ledger_task_queue", args=[projects[0].slug]))
        project = get_object_or_404(Project, slug=slug) if slug else None
        now = clock.now()
        rows: list[dict[str, Any]] = []
        more = False
        if project is not None:
            ready = with_compact_state(
                Task.objects.filter(project=project, status=TaskStatus.READY).select_related("project", "reserved_for"),
                now=now,
            ).order_by("-priority", "ready_since", "id")
            tasks = list(ready[: QUEUE_SHOWN + 1])
            more = len(tasks) > QUEUE_SHOWN
            # "Can somebody claim it?" (`with_claimability`'s rule) asked of the rows shown only, in a second
            # statement: as a column, PostgreSQL answered it with a hashed set of every claimable task of every
            # project (10,940 at 40k tasks, 136 ms), whatever the LIMIT.
            claimable_ids = set(
                claimable_tasks(project=None, now=now, by_anyone=True, holds=HOLDS_SET)
                .filter(pk__in=[task.pk for task in tasks])
                .order_by()
                .values_list("pk", flat=True)
            )
            for task in tasks:
                task.claimable = task.pk in claimable_ids  # type: ignore[attr-defined]
            position = 0
            for task in tasks[:QUEUE_SHOWN]:
                claimable = bool(getattr(task, "claimable", False))
                position += 1 if claimable else 0
                rows.append(
                    {
                        "task": task,
                        "position": position if claimable else None,
                        "url": self._task_url(task),
                        "status": status_cell(task),
                        "claimability": claimability_cell(task),
                        "waiting": duration((now - task.ready_since).total_seconds()) if task.ready_since else EMPTY,
                        "ready_since": moment(task.ready_since),
                        "holder": getattr(task, "holder_handle", None) or EMPTY,
                    }
                )
        context = {
            **self.admin_site.each_context(request),
            "title": f"Queue of {project.slug}" if project else "Queues",
            "subtitle": None,
            "opts": Task._meta,
            "project": project,
            "projects": projects,
            "rows": rows,
            "more": more,
            "shown": QUEUE_SHOWN,
            "now": moment(now),
            "list_url": reverse("admin:ledger_task_changelist")
            + (f"?project__id__exact={project.pk}&claimable=yes" if project else ""),
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(request, "admin/ledger/task/queue.html", context)


def present_blockers(task: Task, *, now: Any) -> list[dict[str, Any]]:
    """The tasks this one waits for now, with their effective status (in progress while held)."""
    live = live_attempts(now).filter(task=OuterRef("blocked_by"))
    dependencies = (
        TaskDependency.objects.filter(task=task, removed_at__isnull=True)
        .select_related("blocked_by")
        .annotate(other_live=Exists(live))
        .order_by("blocked_by__number")
    )
    shown = []
    for dependency in dependencies[:100]:
        other = dependency.blocked_by
        status = IN_PROGRESS if dependency.other_live else other.status
        shown.append(
            {
                "task": other,
                "url": reverse("admin:ledger_task_change", args=[other.pk]),
                "status": badge(status, EFFECTIVE_LABELS.get(status, status)),
                "resolved": other.status in RESOLVED_STATUSES,
            }
        )
    return shown


def status_buttons(task: Task) -> list[dict[str, str]]:
    """The status changes the task page offers as buttons: the transitions allowed from its stored status."""
    allowed = ALLOWED_TRANSITIONS[task.status]
    buttons = []
    if TaskStatus.READY in allowed and task.status not in (TaskStatus.DONE,):
        buttons.append({"target": "ready", "label": "Mark ready"})
    if TaskStatus.OPEN in allowed and task.status != TaskStatus.CANCELLED:
        buttons.append({"target": "open", "label": "Move to open"})
    if task.status in (TaskStatus.DONE, TaskStatus.CANCELLED):
        buttons.append({"target": "reopen", "label": "Reopen"})
    return buttons

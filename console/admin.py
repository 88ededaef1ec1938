"""The admin control plane (SPEC §10): every model's admin is registered here, on Leasehold's site.

Django's admin autodiscovery imports this module (`console` is in
INSTALLED_APPS). Every write goes through a service with
`Actor(user=request.user)`; nothing is deletable by anyone (`delete_selected`
is disabled site-wide and every ModelAdmin refuses delete). `Ledger admins`
run the actions; `Managers` view everything and export events as CSV. One
package per area (`console/tasks/`, `console/fleet/`, `console/audit/`,
`console/reports/`, and a room's own pages: `console/landing/`,
`console/runners/`), each `__init__.py` saying what it holds; shared pieces
at the top: `console/base.py`, `console/confirm.py`, `console/site.py`,
`console/auth_admin.py`, and the webhooks' admin (`console/webhooks.py`);
templates under `templates/admin/`.
"""

from __future__ import annotations

from django.contrib import admin

from console.audit.decisions import DecisionAdmin
from console.audit.events import EventAdmin
from console.audit.findings import FindingAdmin
from console.audit.incidents import IncidentAdmin
from console.fleet.agents import AgentAdmin
from console.fleet.allocations import AllocationAdmin
from console.fleet.attempts import AttemptAdmin
from console.fleet.environments import EnvironmentAdmin
from console.fleet.reservations import PathReservationAdmin
from console.fleet.runs import ReconciliationRunAdmin
from console.runners.admin import RunnerAdmin
from console.site import install
from console.tasks.projects import ProjectAdmin
from console.tasks.reviews import ReviewRequestAdmin
from console.tasks.tasks import TaskAdmin
from console.webhooks import WebhookDeliveryAdmin, WebhookEndpointAdmin
from environments.models import Environment
from insight.models import Incident
from leases.models import Allocation, Attempt, PathReservation, ReviewRequest
from ledger.models import Agent, Decision, Event, Project, Task
from push.models import WebhookDelivery, WebhookEndpoint
from reconciliation.models import Finding, ReconciliationRun
from runners.models import Runner

install(admin.site)

admin.site.register(Project, ProjectAdmin)
admin.site.register(Task, TaskAdmin)
admin.site.register(Agent, AgentAdmin)
admin.site.register(Event, EventAdmin)
admin.site.register(Environment, EnvironmentAdmin)
admin.site.register(Attempt, AttemptAdmin)
admin.site.register(Allocation, AllocationAdmin)
admin.site.register(PathReservation, PathReservationAdmin)
admin.site.register(Finding, FindingAdmin)
admin.site.register(ReconciliationRun, ReconciliationRunAdmin)
admin.site.register(ReviewRequest, ReviewRequestAdmin)
admin.site.register(Decision, DecisionAdmin)
admin.site.register(WebhookEndpoint, WebhookEndpointAdmin)
admin.site.register(WebhookDelivery, WebhookDeliveryAdmin)
admin.site.register(Incident, IncidentAdmin)
admin.site.register(Runner, RunnerAdmin)

# Users, the role groups and django-q2's schedules: nobody deletes them either (console.auth_admin).
from console.auth_admin import install_no_delete_admins  # noqa: E402

install_no_delete_admins(admin.site)

"""A project's landing settings (SPEC §21.1): the one write behind the admin and `set_landing`."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

from core.db import write_transaction
from core.errors import ValidationFailed
from ledger import clock
from ledger.actors import Actor
from ledger.models import BATCH_MAX_LIMIT, EventType, LandMethod, Project
from ledger.services import event_append

# git check-ref-format's rules, the common subset: no spaces, no "..", no control characters.
BRANCH = re.compile(r"^(?!/)(?!.*//)(?!.*\.\.)(?!.*@\{)(?!.*\.lock$)(?!.*/$)[^\x00-\x20~^:?*\[\\\x7f]{1,200}$")
CHECK_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,99}$")
CHECK_COMMAND_MAX_CHARS = 4000
CHECK_TIMEOUT_MAX_SECONDS = 24 * 3600
FIELDS = (
    "target_branch",
    "land_method",
    "check_command",
    "check_timeout_seconds",
    "required_approvals",
    "required_checks",
    "batch_max",
    "max_failed_landings",
)


@dataclass(frozen=True)
class LandingSettings:
    target_branch: str = ""
    land_method: str = LandMethod.MERGE
    check_command: str = ""
    check_timeout_seconds: int = 1800
    required_approvals: int = 0
    required_checks: list[str] = field(default_factory=list)
    batch_max: int = 1
    max_failed_landings: int = 3

    @classmethod
    def of(cls, project: Project) -> LandingSettings:
        return cls(**{name: getattr(project, name) for name in FIELDS})


def validate_landing_settings(settings: LandingSettings) -> None:
    problems: dict[str, list[str]] = {}
    if settings.target_branch and not BRANCH.fullmatch(settings.target_branch):
        problems["target_branch"] = ["a git branch name"]
    if settings.land_method not in LandMethod.values:
        problems["land_method"] = [f"one of {', '.join(LandMethod.values)}"]
    if len(settings.check_command) > CHECK_COMMAND_MAX_CHARS or "\x00" in settings.check_command:
        problems["check_command"] = [f"at most {CHECK_COMMAND_MAX_CHARS} characters, no NUL"]
    if not 1 <= settings.check_timeout_seconds <= CHECK_TIMEOUT_MAX_SECONDS:
        problems["check_timeout_seconds"] = [f"1 to {CHECK_TIMEOUT_MAX_SECONDS}"]
    if not 0 <= settings.required_approvals <= 20:
        problems["required_approvals"] = ["0 to 20"]
    bad_checks = [name for name in settings.required_checks if not CHECK_NAME.fullmatch(str(name))]
    if bad_checks or len(settings.required_checks) > 50:
        problems["required_checks"] = ["at most 50 lowercase slugs (letters, digits, - _ .)"]
    if not 1 <= settings.batch_max <= BATCH_MAX_LIMIT:
        problems["batch_max"] = [f"1 to {BATCH_MAX_LIMIT}"]
    if not 0 <= settings.max_failed_landings <= 1000:
        problems["max_failed_landings"] = ["0 (never quarantine) to 1000"]
    if problems:
        raise ValidationFailed(
            "Invalid landing settings: " + "; ".join(f"{name}: {messages[0]}" for name, messages in problems.items()),
            details={"fields": problems},
        )


@write_transaction
def project_set_landing(*, project: Project, settings: LandingSettings, actor: Actor) -> dict[str, Any]:
    """Store the project's landing settings; returns the changed fields as {name: [old, new]}.

    Turning landing off (an empty target) leaves delivered tasks delivered: a person decides
    whether they are done; nothing is landed or sent back by the switch.
    """
    validate_landing_settings(settings)
    locked = Project.objects.select_for_update().get(pk=project.pk)
    new = asdict(settings)
    new["required_checks"] = sorted(set(new["required_checks"]))
    changed = {name: [getattr(locked, name), value] for name, value in new.items() if getattr(locked, name) != value}
    if not changed:
        return {}
    for name, (_, value) in changed.items():
        setattr(locked, name, value)
        setattr(project, name, value)
    locked.save(update_fields=list(changed))
    event_append(
        type=EventType.LANDING_SETTINGS_CHANGED,
        actor=actor,
        at=clock.now(),
        project=locked,
        payload={"changed": changed},
    )
    return changed

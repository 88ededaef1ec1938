"""The git conditions of SPEC §7 and §15.4, one project's repository at a time, read through `RepositoryView`.

Like the ledger conditions (`reconciliation.conditions`), plain
functions of what was read; none of them writes. `work_seen` is not a
condition: it is what reconciliation saw on the branches of ended attempts
(commits beyond their base), which the services record on the attempts as
evidence of work for inheritance (`leases.selectors.left_work`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from core.errors import ValidationFailed
from leases.labels import parse_label
from leases.models import AttemptStatus
from leases.selectors import INHERITING_STATUSES
from ledger import clock
from ledger.models import RESOLVED_STATUSES
from ledger.paths import paths_overlap
from reconciliation.conditions import BRANCH_MISSING_GRACE, Observation, attempt_observation
from reconciliation.git import GitError, LocalRepository, Worktree, is_url, remote_heads, worktree_cleanliness
from reconciliation.models import Condition, SubjectType
from reconciliation.snapshot import ActiveAttempt, BranchDelivery, BranchHistory, EndedAttempt, ProjectRow

# A completed attempt's branch may take a moment to be pushed after the finish call.
COMPLETED_BRANCH_GRACE = timedelta(minutes=10)
EMPTY_DELIVERIES: Mapping[str, BranchDelivery] = {}


class RepositoryView:
    """One project's repository as this run sees it; each git question is asked at most once.

    A URL is read with `ls-remote` only: its branches are known, whether one
    is merged is not (`merged` answers None), and it has no worktrees or
    commit times. A project's `remote`, when it names another repository
    than `repository`, is read with `ls-remote` too: a branch there exists,
    and a tip there is pushed. Without a `repository`, the `remote` is the
    repository.
    """

    def __init__(self, project: ProjectRow) -> None:
        self.project = project
        self.local: LocalRepository | None = None
        # Branch → its tip's committer time (local repositories only): a sign of work.
        self.tip_times: dict[str, datetime] = {}
        source = project.repository or project.remote
        if is_url(source):
            self.heads = remote_heads(source)
        else:
            self.local = LocalRepository(source)
            self.heads, self.tip_times = self.local.heads_and_tip_times()
        if project.default_branch not in self.heads:
            raise GitError(f"default branch {project.default_branch!r} not found in {source}")
        self.remote_heads: dict[str, str] | None = None
        if project.remote and project.remote != source:
            self.remote_heads = remote_heads(project.remote)
        self._merged: dict[str, bool | None] = {}
        self._history: tuple[set[str], set[str]] | None = None

    def has_branch(self, branch: str) -> bool:
        """The repository, or the project's remote, has the branch."""
        return branch in self.heads or (self.remote_heads is not None and branch in self.remote_heads)

    def pushed(self, branch: str) -> bool | None:
        """The remote has the branch at the repository's tip; None without a separate remote."""
        if self.remote_heads is None or branch not in self.heads:
            return None
        return self.remote_heads.get(branch) == self.heads[branch]

    def merged_work(self, *, branch: str, head_commit: str | None) -> bool | None:
        """Whether the work of a branch that is gone reached the default branch; None when git cannot say (URL).

        Reached it: its head is an ancestor of the default branch (or of a
        remote-tracking copy of it), or a commit there carries a
        `Leasehold-Label` trailer naming the branch (a squash or cherry-pick).
        """
        if self.local is None:
            return None
        if self._history is None:
            shas: set[str] = set()
            labelled: set[str] = set()
            for sha, trailers in self.local.history_of(self.project.default_branch):
                shas.add(sha)
                for value in trailers:
                    try:
                        named = parse_label(value).branch
                    except ValidationFailed:
                        continue  # a trailer not written by Leasehold's hook names nothing
                    if named:
                        labelled.add(named)
            self._history = (shas, labelled)
        shas, labelled = self._history
        return (head_commit is not None and head_commit in shas) or branch in labelled

    def merged(self, branch: str) -> bool | None:
        """Whether the branch is merged into the default branch; None when git cannot say (URL)."""
        if branch not in self._merged:
            if self.local is not None:
                self._merged[branch] = self.local.is_ancestor(branch, self.project.default_branch)
            else:
                same_tip = self.heads.get(branch) == self.heads[self.project.default_branch]
                self._merged[branch] = True if same_tip else None
        return self._merged[branch]

    def landed(self, tip: str | None, delivery: BranchDelivery | None) -> bool:
        """Whether a branch at `tip` holds nothing beyond what its tasks landed (SPEC §21.2): its tip is
        a landed task's delivered head, or an ancestor of one. Work committed after the delivery is not landed."""
        if delivery is None or not delivery.landed_heads or not tip:
            return False
        if tip in delivery.landed_heads:
            return True
        local = self.local
        return local is not None and any(local.contains(tip, head) for head in sorted(delivery.landed_heads))

    def commits_ahead(self, branch: str) -> int | None:
        if self.local is None:
            return None
        return self.local.commits_ahead(branch, self.project.default_branch)

    def worktrees(self) -> list[Worktree]:
        return self.local.worktrees() if self.local is not None else []


def branch_missing(view: RepositoryView, attempts: Iterable[ActiveAttempt], *, now: datetime) -> Iterator[Observation]:
    """A live attempt, older than the grace period, whose branch neither the repository nor its remote has."""
    for attempt in attempts:
        if (
            attempt.project_id == view.project.id
            and attempt.is_live(now)
            and attempt.branch
            and attempt.claimed_at < now - BRANCH_MISSING_GRACE
            and not view.has_branch(attempt.branch)
        ):
            yield attempt_observation(
                Condition.BRANCH_MISSING,
                attempt,
                {"branch": attempt.branch, "claimed_at": clock.iso(attempt.claimed_at)},
            )


def orphan_branch(
    view: RepositoryView,
    histories: dict[str, BranchHistory],
    deliveries: Mapping[str, BranchDelivery] = EMPTY_DELIVERIES,
) -> Iterator[Observation]:
    """A branch in the repository named by attempts that all ended without completing, and not merged.

    The work of a failed, expired, released or revoked attempt: nobody will
    finish it on its own. A branch no attempt ever named is not the ledger's
    business and is never reported. A delivered task's branch waits for a
    lander, and a landed task's branch is merged (SPEC §21.2): neither is an orphan.
    """
    for branch in sorted(view.heads):
        history = histories.get(branch)
        if branch == view.project.default_branch or history is None or not history.all_terminal_none_completed:
            continue
        delivery = deliveries.get(branch)
        if delivery is not None and (delivery.delivered or view.landed(view.heads[branch], delivery)):
            continue
        merged = view.merged(branch)
        if merged:
            continue
        yield Observation(
            condition=Condition.ORPHAN_BRANCH,
            project_id=view.project.id,
            subject_type=SubjectType.BRANCH,
            subject_key=branch,
            detail={
                "tip": view.heads[branch],
                "merged": merged,
                "commits_ahead": view.commits_ahead(branch),
                "attempts": history.attempts,
                "latest_attempt": history.latest_attempt_id,
                **({"pushed": view.pushed(branch)} if view.remote_heads is not None else {}),
            },
            attempt_id=history.latest_attempt_id,
        )


REMOVABLE = "removable"
QUARANTINED = "quarantined"


def orphan_worktree(
    view: RepositoryView,
    worktrees: Iterable[Worktree],
    histories: dict[str, BranchHistory],
    *,
    live_branches: set[str],
    deliveries: Mapping[str, BranchDelivery] = EMPTY_DELIVERIES,
) -> Iterator[Observation]:
    """A linked worktree on a branch some attempt named, with no live attempt on it now.

    `removable` only when the work is safe without it — its branch is merged
    into the default branch, or its task landed it (SPEC §21.2), or its latest
    attempt was discarded by an admin — and nothing in it would be lost: no
    uncommitted change, no untracked file, not locked. Anything else is
    `quarantined`: kept for a person to look at. The main worktree, bare
    entries, detached worktrees and worktrees whose directory is gone (git's
    own `prune` handles those) are not reported, nor is a delivered task's
    worktree: its branch waits in the landing queue.

    A landed task's removable worktree is observed with `detail.landed`: it is
    where the work was meant to end, so the services prune it on request but
    record no finding for it (`is_landed_and_removable`).
    """
    for worktree in worktrees:
        branch = worktree.branch
        if worktree.is_main or worktree.bare or worktree.prunable or branch is None:
            continue
        history = histories.get(branch)
        if history is None or branch in live_branches:
            continue
        delivery = deliveries.get(branch)
        if delivery is not None and delivery.delivered:
            continue
        landed = view.landed(view.heads.get(branch) or worktree.head, delivery)
        merged = landed or (view.merged(branch) if branch in view.heads else False)
        reasons: list[str] = []
        modified: int | None
        untracked: int | None
        try:
            cleanliness = worktree_cleanliness(worktree.path)
            modified, untracked = cleanliness.modified, cleanliness.untracked
        except GitError:
            modified = untracked = None
            reasons.append("status_unreadable")
        if not merged and not history.latest_attempt_discarded:
            reasons.append("unmerged")
        if modified:
            reasons.append("uncommitted_changes")
        if untracked:
            reasons.append("untracked_files")
        if worktree.locked:
            reasons.append("locked")
        yield Observation(
            condition=Condition.ORPHAN_WORKTREE,
            project_id=view.project.id,
            subject_type=SubjectType.WORKTREE,
            subject_key=worktree.path,
            detail={
                "disposition": QUARANTINED if reasons else REMOVABLE,
                "reasons": reasons,
                "branch": branch,
                "head": worktree.head,
                "merged": merged,
                **({"landed": True} if landed else {}),
                "discarded": history.latest_attempt_discarded,
                "modified": modified,
                "untracked": untracked,
                "latest_attempt": history.latest_attempt_id,
            },
            attempt_id=history.latest_attempt_id,
        )


def is_landed_and_removable(observation: Observation) -> bool:
    """A landed task's clean worktree: pruned on request, never a finding (SPEC §21.2)."""
    return (
        observation.condition == Condition.ORPHAN_WORKTREE
        and observation.detail.get("landed") is True
        and observation.detail.get("disposition") == REMOVABLE
    )


def completed_branch_missing(
    view: RepositoryView, attempts: Iterable[EndedAttempt], *, now: datetime
) -> Iterator[Observation]:
    """A completed attempt names a branch that neither exists (here or on the remote) nor was merged.

    The finished work has no home: whoever reviews or ships it cannot find
    it. A repository known only by URL cannot tell merged work from lost
    work, so there the condition is not judged; neither within the grace
    period after the finish, while the branch may still be on its way, nor
    for a task that landed (a forge often deletes a merged branch).
    """
    for attempt in attempts:
        if (
            attempt.project_id != view.project.id
            or attempt.status != AttemptStatus.COMPLETED
            or attempt.task_landed
            or not attempt.branch
            or attempt.finished_at >= now - COMPLETED_BRANCH_GRACE
            or view.has_branch(attempt.branch)
        ):
            continue
        if view.merged_work(branch=attempt.branch, head_commit=attempt.head_commit) is not False:
            continue
        yield attempt_observation(
            Condition.COMPLETED_BRANCH_MISSING,
            attempt,
            {
                "branch": attempt.branch,
                "head_commit": attempt.head_commit,
                "finished_at": clock.iso(attempt.finished_at),
            },
        )


def work_seen(view: RepositoryView, attempts: Iterable[EndedAttempt]) -> dict[int, int]:
    """Commits beyond its base on the branch of each ended attempt a claim may inherit from, where they changed.

    Only attempts whose holder reported no commits (a crash, a release or
    failure without git facts) and whose task is still open: the count is
    what makes their branch inheritable (`leases.selectors.left_work`).
    Without a known base commit the count is against the default branch.
    """
    seen: dict[int, int] = {}
    if view.local is None:
        return seen
    for attempt in attempts:
        branch = attempt.branch
        if (
            attempt.project_id != view.project.id
            or attempt.status not in INHERITING_STATUSES
            or attempt.task_status in RESOLVED_STATUSES
            or (attempt.commits_ahead or 0) > 0
            or not branch
            or branch not in view.heads
        ):
            continue
        count = view.local.commits_since(branch, base_commit=attempt.base_commit) if attempt.base_commit else None
        if count is None:
            count = view.commits_ahead(branch)
        if count is not None and count != attempt.seen_commits_ahead:
            seen[attempt.id] = count
    return seen


def branch_activity(view: RepositoryView) -> dict[tuple[int, str], datetime]:
    """(project, branch) → when its tip was committed: commits are signs of life and of work."""
    return {(view.project.id, branch): moment for branch, moment in view.tip_times.items()}


# How many changed paths a finding names; the count says how many there were.
UNRESERVED_FILES_SHOWN = 20


@dataclass(frozen=True)
class LiveReservation:
    """Another attempt's live exclusive reservation, as `unreserved_change` compares branches against it."""

    attempt_id: int
    task_id: int
    task_key: str
    paths: list[str]


def unreserved_change(
    view: RepositoryView, attempts: Iterable[EndedAttempt], reservations: list[LiveReservation]
) -> Iterator[Observation]:
    """A finished attempt's branch changed files inside another attempt's live exclusive reservation (SPEC §19).

    The change is `git diff --name-only base..head` of the attempt's branch
    (base: its base commit, else the merge base with the default branch;
    head: the branch's tip here, else the head it reported). A reservation
    of the same task is its successor's, who continues that work: not a
    conflict. Only local repositories can answer.
    """
    if view.local is None or not reservations:
        return
    for attempt in attempts:
        if attempt.project_id != view.project.id or not attempt.branch:
            continue
        head = view.heads.get(attempt.branch) or attempt.head_commit
        if not head:
            continue
        base = attempt.base_commit or view.local.merge_base(head, view.project.default_branch)
        if not base:
            continue
        changed = view.local.changed_files(base, head)
        if not changed:
            continue
        for reservation in reservations:
            if reservation.task_id == attempt.task_id:
                continue
            inside = [path for path in changed if any(paths_overlap(path, held) for held in reservation.paths)]
            if inside:
                yield attempt_observation(
                    Condition.UNRESERVED_CHANGE,
                    attempt,
                    {
                        "branch": attempt.branch,
                        "files": inside[:UNRESERVED_FILES_SHOWN],
                        "files_total": len(inside),
                        "reserved_by_task": reservation.task_key,
                        "reserved_by_attempt": reservation.attempt_id,
                        "reserved_paths": reservation.paths[:UNRESERVED_FILES_SHOWN],
                    },
                )

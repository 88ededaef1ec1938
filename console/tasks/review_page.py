"""A review request's own page (SPEC §16.1, issue 32): what a human reviewer needs to decide.

The worker's summary and next steps, the checks at the reviewed head, and the branch's diff
against its base: read from the project's repository with git, before the admin's transaction
opens (never inside one), at most DIFF_MAX_BYTES of it, and escaped by the template like every
other value. The decision buttons lead to the same confirmation page as the list actions
(`console.tasks.reviews`), which calls `leases.services.review_decide`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from leases.models import ReviewRequest
from reconciliation.git import GitError, LocalRepository, is_commit, is_url

# Enough for a reviewable change; past it the page says the diff is cut and where to read the rest.
DIFF_MAX_BYTES = 200_000


@dataclass(frozen=True)
class DiffLine:
    kind: str  # "add", "del", "hunk", "file" or "" (context)
    text: str


@dataclass
class ReviewDiff:
    base: str = ""
    head: str = ""
    lines: list[DiffLine] = field(default_factory=list)
    truncated: bool = False
    unavailable: str = ""
    max_bytes: int = DIFF_MAX_BYTES

    @property
    def empty(self) -> bool:
        return not self.unavailable and not self.lines


def _kind(line: str) -> str:
    if line.startswith(("diff --git", "+++ ", "--- ", "index ", "rename ", "new file", "deleted file")):
        return "file"
    if line.startswith("@@"):
        return "hunk"
    if line.startswith("+"):
        return "add"
    if line.startswith("-"):
        return "del"
    return ""


def review_diff(review: ReviewRequest) -> ReviewDiff:
    """The reviewed head's diff against the work's base commit (else its merge base with the default branch).

    Runs git: call it outside any transaction.
    """
    project = review.task.project
    head = review.head_commit or ""
    base = review.work_attempt.base_commit or ""
    if not is_commit(head):
        return ReviewDiff(unavailable="The worker reported no head commit: there is no branch to show.")
    if not project.repository or is_url(project.repository):
        return ReviewDiff(
            head=head,
            unavailable="The project's repository is not a path on this server, so the diff cannot be read here.",
        )
    try:
        repository = LocalRepository(project.repository)
        if not is_commit(base):
            base = repository.merge_base(head, project.default_branch) or ""
        diff = repository.bounded_diff(base, head, max_bytes=DIFF_MAX_BYTES) if base else None
    except GitError as exc:
        return ReviewDiff(base=base, head=head, unavailable=f"git could not answer: {exc}")
    if diff is None:
        return ReviewDiff(
            base=base,
            head=head,
            unavailable="The repository does not have the reviewed commits (not pushed, or pruned).",
        )
    lines = diff.text.splitlines()
    if diff.truncated and lines:
        lines = lines[:-1]  # the last line was cut mid-way
    return ReviewDiff(
        base=base, head=head, lines=[DiffLine(_kind(line), line) for line in lines], truncated=diff.truncated
    )

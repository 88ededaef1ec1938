"""The command's credential (SPEC §23.2): a token good for one attempt's own calls, minted by its holder."""

from __future__ import annotations

from core.errors import LedgerError
from leases.models import Attempt
from leases.services.holding import HolderProof, held_attempt, refusals_after_commit
from leases.tokens import new_attempt_token
from ledger import clock


@refusals_after_commit
def attempt_mint_token(*, proof: HolderProof) -> str | LedgerError:
    """A fresh attempt token for the command the holder starts; the attempt's earlier one dies with it.

    Only its SHA-256 is stored. The token is refused once the attempt is no
    longer active or its lease has passed (`leases.selectors.attempt_for_token`),
    so it dies however the attempt ends. Not replayed under an Idempotency-Key:
    a retried call mints another, and the one nobody received is dead.
    Neither extends the lease nor counts as work.
    """
    held = held_attempt(proof, now=clock.now(), lock_task=False, lean=True)
    if isinstance(held, LedgerError):
        return held
    token, token_hash = new_attempt_token(attempt_id=held.pk)
    Attempt.objects.filter(pk=held.pk).update(command_token_hash=token_hash)
    return token

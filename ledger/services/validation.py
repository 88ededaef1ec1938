"""Model field validation for services, answered as `VALIDATION_ERROR`."""

from __future__ import annotations

from collections.abc import Iterable

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db.models import Model

from core.errors import ValidationFailed


def validate_model(instance: Model, *, exclude: Iterable[str] = ()) -> None:
    """Field validation without the per-foreign-key existence queries."""
    foreign_keys = [f.name for f in instance._meta.concrete_fields if f.is_relation]
    try:
        instance.full_clean(exclude=[*exclude, *foreign_keys], validate_unique=False, validate_constraints=False)
    except DjangoValidationError as exc:
        raise ValidationFailed(
            "; ".join(f"{field}: {' '.join(messages)}" for field, messages in exc.message_dict.items()),
            details={"fields": exc.message_dict},
        ) from None

"""The ground of every ledger model: rows that are never hard-deleted (SPEC §1.6)."""

from __future__ import annotations

from typing import NoReturn, TypeVar

from django.db import models

_M = TypeVar("_M", bound=models.Model)


class DeletionRefused(Exception):
    """Raised by every attempt to hard-delete a ledger row."""


class NoDeleteQuerySet(models.QuerySet[_M]):
    def delete(self) -> NoReturn:
        raise DeletionRefused(f"{self.model.__name__} rows are never deleted; move them to a terminal state.")


class NoDeleteModel(models.Model):
    objects = NoDeleteQuerySet.as_manager()

    class Meta:
        abstract = True

    def delete(self, *args: object, **kwargs: object) -> NoReturn:
        raise DeletionRefused(f"{type(self).__name__} rows are never deleted; move them to a terminal state.")

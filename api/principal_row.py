"""The token's agent, with what the request will look up next, in one statement (issue 34, SPEC §24).

Every agent request reads its token's agent (`ledger.selectors.agent_for_token`). Requests of
the hot path then read more, by values the request already carries:

- claim-next its project, by the body's slug, among the agent's own projects
  (`ledger.selectors.project_by_slug`);
- a write under an `Idempotency-Key` the stored answer for that key (`leases.idempotency`);
- a plain claim-next (no wait, no task class, no key) whether anything of that project is claimable
  for the agent: claim-next's own read outside any transaction (`leases.services.claim_next`,
  `any_candidate_read`), as an `EXISTS` column, so that a claim that finds nothing, most of a fleet's
  requests, is one statement, and one that finds something goes straight to its transaction.

`agent_with` reads the agent and those rows in one statement: the agent by its token's hash, as
`agent_for_token` does (active agents only, nothing cached: a rotation or deactivation refuses the
token at the next request), LEFT JOINed with the project of that slug when the agent is one of its
members, and with the agent's record of that key (a record is written with its answer, in the
write's transaction: `leases.idempotency`). The statement is written once per shape (with or without
each join) from the models' metadata, and runs like `core.prepared`'s statements (prepared on
PostgreSQL).
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import connections, models

from core.prepared import run_select
from leases.models import IdempotencyRecord
from ledger.models import Agent, Project
from ledger.tokens import AGENT_TOKEN_PREFIX, hash_token


@dataclass(frozen=True)
class AgentWith:
    agent: Agent
    # The project of the slug asked for, None when the agent is not one of its members (or no such project).
    project: Project | None = None
    # The agent's record of the key asked for, None when there is none yet.
    record: IdempotencyRecord | None = None
    # Asked with the project: whether claim-next's read found anything of it claimable for the agent
    # (None: not asked, or no project).
    claimable: bool | None = None


@dataclass(frozen=True)
class _Shape:
    sql: str
    # The embedded claim-next read (`any_candidate_read`), None when not asked; its parameters (`now`) come
    # first, its EXISTS being the last column read.
    read: Any
    # Per model read, in column order: (model, first column, field attnames, converters per column).
    parts: tuple[tuple[type[models.Model], int, tuple[str, ...], tuple[tuple[Any, ...], ...]], ...]
    columns: tuple[Any, ...]


_SHAPES: dict[tuple[bool, bool, bool, str, str], _Shape] = {}


def _shape(*, project: bool, record: bool, claimable: bool, using: str) -> _Shape:
    connection = connections[using]
    key = (project, record, claimable, using, connection.vendor)
    found = _SHAPES.get(key)
    if found is not None:
        return found
    quote = connection.ops.quote_name
    aliases: list[tuple[type[models.Model], str]] = [(Agent, "a")]
    joins = []
    if project:
        through: Any = Agent.projects.through
        agent_column = through._meta.get_field("agent").column
        project_column = through._meta.get_field("project").column
        m_table, m_agent, m_project = (quote(n) for n in (through._meta.db_table, agent_column, project_column))
        a_id, p_id = quote(Agent._meta.pk.column), quote(Project._meta.pk.column)
        member = f"SELECT 1 FROM {m_table} m WHERE m.{m_agent} = a.{a_id} AND m.{m_project} = p.{p_id}"  # noqa: S608
        slug_column = quote(Project._meta.get_field("slug").column)
        joins.append(f"LEFT JOIN {quote(Project._meta.db_table)} p ON p.{slug_column} = %s AND EXISTS ({member})")
        aliases.append((Project, "p"))
    if record:
        meta: Any = IdempotencyRecord._meta
        joins.append(
            f"LEFT JOIN {quote(meta.db_table)} r ON r.{quote(meta.get_field('agent').column)} "
            f"= a.{quote(Agent._meta.pk.column)} "
            f"AND r.{quote(meta.get_field('key').column)} = %s"
        )
        aliases.append((IdempotencyRecord, "r"))
    selected: list[str] = []
    parts = []
    columns = []
    for model, alias in aliases:
        fields: Any = model._meta.concrete_fields
        converters = []
        for field in fields:
            column = field.get_col(alias)
            columns.append(column)
            converters.append(
                tuple(connection.ops.get_db_converters(column)) + tuple(field.get_db_converters(connection))
            )
            selected.append(f"{alias}.{quote(field.column)}")
        parts.append((model, len(selected) - len(fields), tuple(f.attname for f in fields), tuple(converters)))
    read = None
    if claimable:
        from leases.services.claim_next import any_candidate_read  # the door's statement embeds the service's read

        pk_column = quote(Agent._meta.pk.column)
        read = any_candidate_read(columns={"project": f"p.{pk_column}", "agent": f"a.{pk_column}"}, using=using)
        selected.append(f"EXISTS ({read.sql})")
    agent_meta = Agent._meta
    # Only quoted names of the models' own tables and columns go into the text; values are parameters.
    sql = "SELECT {} FROM {} a {} WHERE a.{} = %s AND a.{} = %s".format(  # noqa: S608
        ", ".join(selected),
        quote(agent_meta.db_table),
        " ".join(joins),
        quote(agent_meta.get_field("token_hash").column),
        quote(agent_meta.get_field("is_active").column),
    )
    found = _SHAPES[key] = _Shape(sql=sql, read=read, parts=tuple(parts), columns=tuple(columns))
    return found


def agent_with(
    token: str,
    *,
    project_slug: str | None = None,
    idempotency_key: str | None = None,
    claimable_now: datetime | None = None,
    using: str = "default",
) -> AgentWith | None:
    """The active agent of this token with the project and record asked for, or None for a token refused.

    `claimable_now` (with a project): also claim-next's read of whether anything of the project is
    claimable for the agent at that time (`leases.services.claim_next.any_candidate_read`).
    """
    if not token.startswith(AGENT_TOKEN_PREFIX) or len(token) > 200:
        return None
    if claimable_now is not None and project_slug is None:
        raise ValueError("The claimable read needs the project.")
    digest = hash_token(token)
    shape = _shape(
        project=project_slug is not None,
        record=idempotency_key is not None,
        claimable=claimable_now is not None,
        using=using,
    )
    params: list[Any] = []
    if claimable_now is not None:
        params += shape.read.params_for({"now": claimable_now})
    if project_slug is not None:
        params.append(project_slug)
    if idempotency_key is not None:
        params.append(idempotency_key)
    params += [digest, True]
    rows = run_select(shape.sql, params, using=using)
    if not rows:
        return None
    connection = connections[using]
    row = list(rows[0])
    instances: list[Any] = []
    for model, start, names, converters in shape.parts:
        values = row[start : start + len(names)]
        if values[names.index(model._meta.pk.attname)] is None:
            instances.append(None)  # the LEFT JOIN found nothing
            continue
        for position, functions in enumerate(converters):
            for function in functions:
                values[position] = function(values[position], shape.columns[start + position], connection)
        instances.append(model.from_db(using, list(names), values))
    agent = instances[0]
    if not hmac.compare_digest(agent.token_hash, digest):
        return None
    found = dict(zip((model for model, *_ in shape.parts), instances, strict=True))
    project = found.get(Project)
    return AgentWith(
        agent=agent,
        project=project,
        record=found.get(IdempotencyRecord),
        claimable=bool(row[-1]) if claimable_now is not None and project is not None else None,
    )

"""`GET /api/v1/search/`: snippets of tasks and notes, never whole bodies."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from api.auth import caller_of
from api.base import ApiView
from api.inputs import decode_cursor, encode_cursor, query_input
from api.schema import READ_ERRORS, error_responses
from leases.search import RANK_WINDOW, search_answer
from ledger.selectors import project_by_slug

MAX_OFFSET = 1000


class SearchHitSerializer(serializers.Serializer[Any]):
    kind = serializers.ChoiceField(choices=["task", "note"])
    task = serializers.CharField(help_text="Task key.")
    title = serializers.CharField()
    note = serializers.IntegerField(allow_null=True)
    attempt = serializers.IntegerField(allow_null=True)
    snippet = serializers.CharField(allow_blank=True, help_text="At most 300 characters; matches in **bold**.")


class SearchApi(ApiView):
    """Indexed full-text search on both databases (SPEC §25); snippets ≤ 300 characters; then SEARCH_TOO_BROAD."""

    class FilterSerializer(serializers.Serializer[Any]):
        q = serializers.CharField(max_length=200, help_text="Words to find (web-search syntax).")
        project = serializers.SlugField(required=False, max_length=50)
        cursor = serializers.CharField(required=False, max_length=300)
        limit = serializers.IntegerField(required=False, min_value=1, max_value=50, default=20)

    class OutputSerializer(serializers.Serializer[Any]):
        results = SearchHitSerializer(many=True)
        next_cursor = serializers.CharField(allow_null=True)
        windowed = serializers.BooleanField(
            help_text=(
                f"True when the words matched more than {RANK_WINDOW:,} visible tasks or notes: the newest "
                f"{RANK_WINDOW:,} of each were ranked, not all (add words or a project to rank them all)."
            )
        )

    @extend_schema(
        operation_id="search",
        parameters=[FilterSerializer],
        responses={200: OutputSerializer, **error_responses(*READ_ERRORS)},
    )
    def get(self, request: Request) -> Response:
        params = query_input(self.FilterSerializer, request)
        agent = caller_of(request).agent
        project = project_by_slug(params["project"], agent=agent) if "project" in params else None
        offset = decode_cursor(params["cursor"], expected={"offset": int})["offset"] if "cursor" in params else 0
        offset = max(0, min(offset, MAX_OFFSET))
        answer = search_answer(query=params["q"], agent=agent, project=project, offset=offset, limit=params["limit"])
        next_offset = offset + len(answer.hits)
        next_cursor = encode_cursor({"offset": next_offset}) if answer.more and next_offset <= MAX_OFFSET else None
        output = {"results": answer.hits, "next_cursor": next_cursor, "windowed": answer.windowed}
        return Response(self.OutputSerializer(output).data)

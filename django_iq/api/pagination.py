"""Cursor pagination by id, and NDJSON streaming of whole listings in bounded batches."""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder
from django.db.models import QuerySet
from django.http import HttpRequest, StreamingHttpResponse

from django_iq.api.filters import Param, parse_id

DEFAULT_LIMIT = 100
MAX_LIMIT = 1000
# Rows read per query while streaming NDJSON: memory stays bounded by one batch.
STREAM_BATCH_SIZE = 1000
NDJSON_CONTENT_TYPE = "application/x-ndjson"
_CURSOR_PREFIX = "id:"


def encode_cursor(last_id: int) -> str:
    """Return the opaque cursor of the page after the row ``last_id``."""
    raw = f"{_CURSOR_PREFIX}{last_id}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> int:
    """Return the id a cursor made by ``encode_cursor`` continues after; ``ValueError`` if it
    is not such a cursor."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise ValueError from None
    if not raw.startswith(_CURSOR_PREFIX):
        raise ValueError
    return parse_id(raw.removeprefix(_CURSOR_PREFIX))


def parse_limit(raw: str) -> int:
    value = int(raw)
    if not 1 <= value <= MAX_LIMIT:
        raise ValueError
    return value


def parse_format(raw: str) -> str:
    if raw not in ("json", "ndjson"):
        raise ValueError
    return raw


CURSOR = Param(
    "cursor",
    {"type": "string"},
    "Where the page starts: the cursor found in the previous page's next link. Leave it out "
    "for the first page.",
    "a cursor taken from a previous page's next link",
    decode_cursor,
)
LIMIT = Param(
    "limit",
    {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": DEFAULT_LIMIT},
    "Rows per page.",
    f"an integer from 1 to {MAX_LIMIT}",
    parse_limit,
)
FORMAT = Param(
    "format",
    {"type": "string", "enum": ["json", "ndjson"], "default": "json"},
    "json: one page as a JSON object. ndjson: every matching row, streamed as one JSON object "
    "per line (application/x-ndjson), in batches of bounded size; cursor and limit do not "
    "apply.",
    "json or ndjson",
    parse_format,
)
PAGE_PARAMS = (CURSOR, LIMIT)


@dataclass(frozen=True)
class Page:
    """One page of rows ordered by id, and the URL of the next page (None on the last)."""

    rows: list[Any]
    next_url: str | None


def paginate(request: HttpRequest, rows: QuerySet[Any], after_id: int | None, limit: int) -> Page:
    """Read the ``limit`` rows of ``rows`` following id ``after_id``, in one query."""
    if after_id is not None:
        rows = rows.filter(pk__gt=after_id)
    # One row more than asked says whether there is a next page without a count.
    found = list(rows.order_by("pk")[: limit + 1])
    if len(found) <= limit:
        return Page(found, None)
    found = found[:limit]
    query = request.GET.copy()
    query["cursor"] = encode_cursor(found[-1].pk)
    return Page(found, request.build_absolute_uri(f"{request.path}?{query.urlencode()}"))


def stream_ndjson(
    rows: QuerySet[Any], serialize: Callable[[Any], dict[str, Any]]
) -> StreamingHttpResponse:
    """Stream every row of ``rows`` by id, one JSON object per line.

    Rows are read in keyset batches of STREAM_BATCH_SIZE (``id > last`` ... ``LIMIT``), not
    with one open cursor: memory stays bounded on every database (MySQL drivers buffer a whole
    result set client-side), and no transaction or cursor is held open while a slow client reads.
    """

    def lines() -> Iterator[bytes]:
        last_id = 0
        while True:
            batch = list(rows.filter(pk__gt=last_id).order_by("pk")[:STREAM_BATCH_SIZE])
            for row in batch:
                yield json.dumps(serialize(row), cls=DjangoJSONEncoder).encode() + b"\n"
            if len(batch) < STREAM_BATCH_SIZE:
                return
            last_id = batch[-1].pk

    return StreamingHttpResponse(lines(), content_type=NDJSON_CONTENT_TYPE)

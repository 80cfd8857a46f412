"""Cursor pagination by id, and NDJSON streaming of whole listings in bounded batches.

A page is bounded twice: by its ``limit`` of rows and by about ``PAGE_MAX_BYTES`` of row text,
so a page of rows with large arguments, return values or tracebacks ends early (its ``next``
link goes on from its last row). The ids of a page are read first with the length of each
row's JSON and text columns, then the rows themselves in batches of about ``BATCH_MAX_BYTES``
(one query for a page of ordinary rows): the server holds one batch of rows and one page at
most, whatever the rows hold.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder
from django.db.models import F, JSONField, QuerySet, TextField, Value
from django.db.models.functions import Cast, Coalesce, Length
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse

from django_iq.api.filters import Param, parse_id

DEFAULT_LIMIT = 100
MAX_LIMIT = 1000
# Row ids read per query while streaming NDJSON.
STREAM_BATCH_SIZE = 1000
# A page stops before the row that would take its rows' text past this size (it always holds
# at least one row).
PAGE_MAX_BYTES = 4 * 1024 * 1024
# Whole rows read per query: as many as fit this much text (at least one).
BATCH_MAX_BYTES = 1024 * 1024
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
    """One page of rows ordered by id, encoded as JSON, and the URL of the next page (None on
    the last)."""

    encoded: list[bytes]
    next_url: str | None

    def response(self) -> HttpResponse:
        """The page as ``{"results": [...], "next": ...}``, joined from the encoded rows."""
        body = b'{"results": [' + b", ".join(self.encoded) + b'], "next": '
        return HttpResponse(
            body + json.dumps(self.next_url).encode() + b"}", content_type="application/json"
        )


def _encode(row: Any, serialize: Callable[[Any], dict[str, Any]]) -> bytes:
    return json.dumps(serialize(row), cls=DjangoJSONEncoder).encode()


def _sized_ids(rows: QuerySet[Any], limit: int) -> list[tuple[int, int]]:
    """``(id, size)`` of the first ``limit`` rows by id, ``size`` the characters of the row's
    JSON and text columns (where arguments, return values and tracebacks are kept)."""
    size: Any = Value(0)
    for field in rows.model._meta.concrete_fields:
        if isinstance(field, JSONField | TextField):
            size = size + Coalesce(Length(Cast(F(field.name), TextField())), 0)
    sized = rows.order_by("pk").annotate(iq_size=size).values_list("pk", "iq_size")
    return list(sized[:limit])


def _rows_of(rows: QuerySet[Any], sized: list[tuple[int, int]]) -> Iterator[Any]:
    """The rows of ``sized`` in id order, read in batches of about ``BATCH_MAX_BYTES``; a row
    deleted since its id was read is skipped."""
    batch: list[int] = []
    total = 0
    for pk, size in sized:
        if batch and total + size > BATCH_MAX_BYTES:
            yield from rows.filter(pk__in=batch).order_by("pk")
            batch, total = [], 0
        batch.append(pk)
        total += size
    if batch:
        yield from rows.filter(pk__in=batch).order_by("pk")


def paginate(
    request: HttpRequest,
    rows: QuerySet[Any],
    after_id: int | None,
    limit: int,
    serialize: Callable[[Any], dict[str, Any]],
) -> Page:
    """Encode the rows of ``rows`` following id ``after_id``: ``limit`` of them, or fewer if
    their text would pass ``PAGE_MAX_BYTES``."""
    if after_id is not None:
        rows = rows.filter(pk__gt=after_id)
    # One id more than asked says whether there is a next page without a count.
    sized = _sized_ids(rows, limit + 1)
    page: list[tuple[int, int]] = []
    total = 0
    for pk, size in sized[:limit]:
        if page and total + size > PAGE_MAX_BYTES:
            break
        page.append((pk, size))
        total += size
    encoded = [_encode(row, serialize) for row in _rows_of(rows, page)]
    if len(page) == len(sized):
        return Page(encoded, None)
    query = request.GET.copy()
    query["cursor"] = encode_cursor(page[-1][0])
    return Page(encoded, request.build_absolute_uri(f"{request.path}?{query.urlencode()}"))


def stream_ndjson(
    rows: QuerySet[Any], serialize: Callable[[Any], dict[str, Any]]
) -> StreamingHttpResponse:
    """Stream every row of ``rows`` by id, one JSON object per line.

    Ids are read in keyset batches of STREAM_BATCH_SIZE (``id > last`` ... ``LIMIT``), whole rows
    about BATCH_MAX_BYTES at a time, not with one open cursor: memory stays bounded on every database
    (MySQL drivers buffer a whole result set client-side), and no transaction or cursor is held
    open while a slow client reads.
    """

    def lines() -> Iterator[bytes]:
        last_id = 0
        while True:
            sized = _sized_ids(rows.filter(pk__gt=last_id), STREAM_BATCH_SIZE)
            for row in _rows_of(rows, sized):
                yield _encode(row, serialize) + b"\n"
            if len(sized) < STREAM_BATCH_SIZE:
                return
            last_id = sized[-1][0]

    return StreamingHttpResponse(lines(), content_type=NDJSON_CONTENT_TYPE)

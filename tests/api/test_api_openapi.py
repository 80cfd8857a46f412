"""The OpenAPI document tells the truth: every routed URL with its methods and permissions is in
it, every query parameter it lists is accepted, and every answer seen matches its schema."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import pytest
from django.urls import URLPattern
from django.utils import timezone

from django_iq.api import urls as api_urls
from django_iq.api.endpoint import Endpoint
from django_iq.api.openapi import document
from django_iq.api.pagination import encode_cursor
from django_iq.models import Entry, JobMinute
from tests.api.test_api import PERMISSIONS, VIEWS, Api, make_user
from tests.factories import (
    EntryErrorFactory,
    EntryFactory,
    QueueFactory,
    RunOutcomeFactory,
    WorkerFactory,
)
from tests.testapp.jobs import record

pytestmark = pytest.mark.django_db

JSON_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "null": (type(None),),
}


def template(pattern: URLPattern) -> str:
    """``entries/<int:entry_id>/`` -> ``/entries/{entry_id}/``."""
    route = str(pattern.pattern)
    for converter in ("int:", "path:", "str:"):
        route = route.replace(f"<{converter}", "<")
    return "/" + route.replace("<", "{").replace(">", "}")


def routes() -> dict[str, Endpoint]:
    found = {}
    for pattern in api_urls.urlpatterns:
        assert isinstance(pattern, URLPattern)
        assert isinstance(pattern.callback, Endpoint), f"{pattern} is not an API Endpoint"
        if pattern.name is not None:  # not the same route without its trailing slash
            found[template(pattern)] = pattern.callback
    return found


def resolve(doc: dict[str, Any], ref: str) -> dict[str, Any]:
    node: Any = doc
    for part in ref.removeprefix("#/").split("/"):
        node = node[part]
    return dict(node)


def problems(schema: dict[str, Any], value: Any, doc: dict[str, Any], at: str = "$") -> list[str]:
    """Where ``value`` breaks ``schema`` (the JSON Schema keywords the document uses)."""
    if "$ref" in schema:
        return problems(resolve(doc, schema["$ref"]), value, doc, at)
    if "oneOf" in schema:
        matching = [s for s in schema["oneOf"] if not problems(s, value, doc, at)]
        return [] if len(matching) == 1 else [f"{at}: {len(matching)} oneOf branches match"]
    found: list[str] = []
    types = schema.get("type")
    if types is not None:
        names = [types] if isinstance(types, str) else types
        fits = any(
            isinstance(value, JSON_TYPES[name])
            and not (isinstance(value, bool) and name in ("integer", "number"))
            for name in names
        )
        if not fits:
            return [f"{at}: {value!r} is not {types}"]
    if "enum" in schema and value not in schema["enum"]:
        found.append(f"{at}: {value!r} not in {schema['enum']}")
    if isinstance(value, int | float) and not isinstance(value, bool):
        if value < schema.get("minimum", value) or value > schema.get("maximum", value):
            found.append(f"{at}: {value} out of range")
    if isinstance(value, str):
        if len(value) < schema.get("minLength", 0):
            found.append(f"{at}: too short")
        if schema.get("format") == "date-time":
            datetime.fromisoformat(value)
        if schema.get("format") == "uri" and not value.startswith("http"):
            found.append(f"{at}: {value!r} is not a URI")
    if isinstance(value, list):
        if not schema.get("minItems", 0) <= len(value) <= schema.get("maxItems", len(value)):
            found.append(f"{at}: wrong number of items")
        for index, item in enumerate(value):
            found += problems(schema.get("items", {}), item, doc, f"{at}[{index}]")
    if isinstance(value, dict):
        found += [
            f"{at}: missing {key!r}" for key in schema.get("required", ()) if key not in value
        ]
        if len(value) < schema.get("minProperties", 0):
            found.append(f"{at}: too few properties")
        properties = schema.get("properties", {})
        extra = schema.get("additionalProperties", True)
        for key, item in value.items():
            if key in properties:
                found += problems(properties[key], item, doc, f"{at}.{key}")
            elif extra is False:
                found.append(f"{at}: undocumented property {key!r}")
            elif isinstance(extra, dict):
                found += problems(extra, item, doc, f"{at}.{key}")
    return found


@pytest.fixture
def doc() -> dict[str, Any]:
    return document()


def test_every_routed_api_url_is_documented_with_its_methods_and_permissions(
    doc: dict[str, Any],
) -> None:
    routed = routes()

    assert set(routed) == set(doc["paths"]), (
        "add the route to OPERATIONS in django_iq/api/openapi.py"
    )
    for path, endpoint in routed.items():
        methods = {
            method.lower(): list(perms)
            for method, perms in endpoint.methods.items()
            if method != "HEAD"
        }
        assert set(doc["paths"][path]) == set(methods), path
        for method, needed in methods.items():
            assert doc["paths"][path][method]["x-permissions"] == needed, (path, method)


def test_every_path_parameter_is_declared_and_every_reference_resolves(
    doc: dict[str, Any],
) -> None:
    text = json.dumps(doc)
    for path, operations in doc["paths"].items():
        for operation in operations.values():
            declared = {p["name"] for p in operation["parameters"] if p["in"] == "path"}
            assert declared == {part[1:-1] for part in path.split("/") if part.startswith("{")}
    for ref in {chunk.split('"')[0] for chunk in text.split('"$ref": "')[1:]}:
        assert resolve(doc, ref)
    assert doc["openapi"] == "3.1.0"
    assert doc["servers"] == [{"url": "/iq/api"}]


def example(parameter: dict[str, Any]) -> str:
    """A valid value of a documented query parameter."""
    if parameter["name"] == "cursor":
        return encode_cursor(1)
    schema = parameter["schema"]
    if "enum" in schema:
        return str(schema["enum"][0])
    return {
        "integer": str(schema.get("minimum", 1)),
        "boolean": "true",
    }.get(schema["type"], "2025-01-31T09:30:00Z" if schema.get("format") else "default")


def test_every_documented_query_parameter_is_accepted(doc: dict[str, Any]) -> None:
    # Staff, with the view permissions the listings need.
    api = Api(make_user("staff", perms=VIEWS))
    QueueFactory(name="default")
    for path, operations in doc["paths"].items():
        operation = operations.get("get")
        if operation is None or "{" in path:
            continue
        for parameter in operation["parameters"]:
            response = api.get(f"/iq/api{path}", **{parameter["name"]: example(parameter)})
            assert response.status_code == 200, (path, parameter["name"], response.content)


class Seen:
    """Checks each answer against the schema the document gives for it."""

    def __init__(self, doc: dict[str, Any]) -> None:
        self.doc = doc
        self.statuses: set[tuple[str, str, str]] = set()

    def check(self, path: str, method: str, response: Any) -> Any:
        status = str(response.status_code)
        documented = self.doc["paths"][path][method]["responses"]
        assert status in documented, f"{method} {path} answered {status}, not documented"
        content = documented[status]["content"]
        if response["Content-Type"] == "application/x-ndjson":
            schema = content["application/x-ndjson"]["schema"]
            lines = b"".join(response.streaming_content).decode().splitlines()
            assert lines
            values = [json.loads(line) for line in lines]
        else:
            schema = content["application/json"]["schema"]
            values = [response.json()]
        for value in values:
            assert problems(schema, value, self.doc) == [], (method, path, status)
        self.statuses.add((path, method, status))
        return values[0]


def test_every_answer_matches_its_documented_schema(doc: dict[str, Any]) -> None:
    operator = Api(make_user("operator", perms=PERMISSIONS))
    seen = Seen(doc)
    queue = QueueFactory(name="emails", max_concurrency=2)
    running = EntryFactory(locked=True, group_key="g")
    Entry.objects.report_progress(
        running.pk, None, done=2, total=5, note="rows", reported_at=timezone.now()
    )
    waiting = EntryFactory(queue=queue)
    EntryErrorFactory(entry_id=running.pk, is_final=False)
    final = EntryErrorFactory(exception_class="shop.Timeout")
    EntryErrorFactory()

    def get(path: str, real: str | None = None, **params: Any) -> Any:
        return seen.check(path, "get", operator.get(f"/iq/api{real or path}", **params))

    page = get("/entries/", limit="1")
    assert page["next"]
    get("/entries/", format="ndjson")
    get("/entries/", state="nope")
    get("/entries/count/")
    get("/entries/{entry_id}/", f"/entries/{running.pk}/")
    get("/entries/{entry_id}/", "/entries/987654/")
    get("/errors/")
    get("/errors/", format="ndjson")
    get("/errors/{error_id}/", f"/errors/{final.pk}/")
    get("/errors/{error_id}/", "/errors/987654/")
    RunOutcomeFactory(return_value={"sent": True}, args=[1], started_at=final.failed_at)
    RunOutcomeFactory(status="failed", exception_class="shop.Timeout", traceback="...")
    get("/outcomes/")
    get("/outcomes/", format="ndjson")
    get("/queues/")
    JobMinute.objects.create(job_name="shop.jobs.invoice", minute=timezone.now(), bucket=9, runs=3)
    get("/jobs/stats/")
    get("/autoscale/")
    WorkerFactory(sessions=[[101, 1.5], [102, 1.5]])
    WorkerFactory(name="web:1:ab:leader", role="leader", stopped_at=timezone.now())
    listed = get("/workers/", include_stopped="true")
    by_name = {w["name"]: w for w in listed["workers"]}
    assert by_name["web:1:ab:leader"]["state"] == "stopped"
    assert sorted(w["sessions"] or 0 for w in listed["workers"]) == [0, 0, 2]
    get("/openapi.json")

    def send(path: str, method: str, real: str, body: Any = None) -> Any:
        if method == "delete":
            response = operator.delete(f"/iq/api{real}")
        else:
            response = operator.post(f"/iq/api{real}", body)
        return seen.check(path, method, response)

    send("/entries/{entry_id}/", "delete", f"/entries/{running.pk}/")
    send("/entries/{entry_id}/", "delete", f"/entries/{waiting.pk}/")
    send("/entries/{entry_id}/", "delete", "/entries/987654/")
    send("/entries/cancel/", "post", "/entries/cancel/", {"ids": [running.pk, 987654]})
    send("/entries/cancel/", "post", "/entries/cancel/", {"ids": "all"})
    send("/errors/requeue/", "post", "/errors/requeue/", {"ids": [final.pk]})
    send("/errors/requeue/", "post", "/errors/requeue/", {"queue": "default"})
    send("/errors/requeue/", "post", "/errors/requeue/", {})
    for action in ("pause", "resume"):
        send(f"/queues/{{name}}/{action}/", "post", f"/queues/emails/{action}/")
        send(f"/queues/{{name}}/{action}/", "post", f"/queues/nope/{action}/")
    for action in ("disable", "enable"):
        send(f"/jobs/{{name}}/{action}/", "post", f"/jobs/{record.name}/{action}/")
        send(f"/jobs/{{name}}/{action}/", "post", f"/jobs/shop.jobs.nope/{action}/")
    seen.check("/queues/", "get", operator.delete("/iq/api/queues/"))  # 405
    seen.check("/queues/", "get", Api(None).get("/iq/api/queues/"))
    seen.check("/queues/", "get", Api(make_user("customer", is_staff=False)).get("/iq/api/queues/"))

    documented = {
        (path, method, status)
        for path, operations in doc["paths"].items()
        for method, operation in operations.items()
        for status in operation["responses"]
        if status in ("200", "202", "404", "409")
    }
    assert documented <= seen.statuses, f"never seen: {sorted(documented - seen.statuses)}"


def test_the_schema_check_catches_undocumented_fields_wrong_types_and_missing_ones(
    doc: dict[str, Any],
) -> None:
    count = {"$ref": "#/components/schemas/Count"}

    assert problems(count, {"count": 1, "estimated": False}, doc) == []
    assert problems(count, {"count": 1, "estimated": False, "extra": 1}, doc) == [
        "$: undocumented property 'extra'"
    ]
    assert problems(count, {"count": "1", "estimated": False}, doc) == [
        "$.count: '1' is not integer"
    ]
    assert problems(count, {"count": True}, doc) == [
        "$: missing 'estimated'",
        "$.count: True is not integer",
    ]


def test_the_served_document_names_the_server_the_api_answers_at() -> None:
    response = Api(make_user("staff")).get("/iq/api/openapi.json")

    assert response.json()["servers"] == [{"url": "http://testserver/iq/api"}]
    schemes = response.json()["components"]["securitySchemes"]
    assert schemes["session"]["name"] == "sessionid"
    assert (schemes["bearer"]["type"], schemes["bearer"]["scheme"]) == ("http", "bearer")

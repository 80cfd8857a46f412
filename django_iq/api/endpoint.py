"""What every API view shares: authentication by API token or session (with its CSRF check),
staff and permission checks, allowed methods, JSON bodies, and errors answered as
``{"error": "..."}`` with their HTTP status."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping
from typing import Any

from django.http import HttpRequest, JsonResponse
from django.http.response import HttpResponseBase
from django.middleware.csrf import get_token
from django.utils.cache import add_never_cache_headers

from django_iq import permissions, token_auth
from django_iq.bounds import text_problem
from django_iq.exceptions import IQError

# Most ids one POST may name, so that a request stays one bounded statement on every database.
MAX_IDS = 1000
# Ids are 64-bit: a larger number names nothing and some drivers refuse it.
MAX_ID = 2**63 - 1

# No API body is more than a few levels deep: an object of lists of ids or of filters.
MAX_BODY_DEPTH = 8

View = Callable[..., HttpResponseBase]
Permissions = tuple[str, ...]


class ApiError(IQError):
    """A refusal answered as ``{"error": message, **details}`` with HTTP ``status``."""

    def __init__(self, status: int, message: str, **details: Any) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.details = details
        self.headers: dict[str, str] = {}

    def response(self) -> JsonResponse:
        response = JsonResponse({"error": self.message, **self.details}, status=self.status)
        for name, value in self.headers.items():
            response[name] = value
        return response


def unauthenticated(message: str, challenge: str = token_auth.CHALLENGE) -> ApiError:
    """A 401 answer inviting the client to authenticate with a bearer token."""
    error = ApiError(401, message)
    error.headers["WWW-Authenticate"] = challenge
    return error


def csrf_refusal(reason: str) -> ApiError:
    """The 403 answer to a session request failing Django's CSRF check."""
    return ApiError(
        403,
        f"CSRF verification failed ({reason}). Send the value of the csrftoken cookie (set by "
        "any GET of this API) in the X-CSRFToken header, from a page of the same origin, or "
        "authenticate with an API token (Authorization: Bearer) instead of the session.",
    )


class InvalidParameter(ApiError, ValueError):
    """A query parameter or body field with a value the API cannot use (HTTP 400)."""

    def __init__(self, name: str, value: Any, expected: str) -> None:
        super().__init__(
            400,
            f"Invalid value {value!r} for {name!r}: expected {expected}.",
            parameter=name,
            value=value,
            expected=expected,
        )


class Endpoint:
    """A view refusing, in this order: a bad API token (401), anonymous callers (401), users
    who are not active staff (403), session requests failing the CSRF check (403), methods not
    in ``methods`` (405), and users without every permission ``methods`` maps the request's
    method to (403). Any ``ApiError`` raised by the view becomes its JSON answer.

    A request with ``Authorization: Bearer <token>`` acts as the token's user and needs no CSRF
    token (it sends no cookie a browser could be tricked into sending). Safe session requests
    make sure the ``csrftoken`` cookie is set, so that a client that logged in can send the
    token with its POST and DELETE requests.
    """

    # The endpoint checks CSRF itself, for session requests only; LoginRequiredMiddleware
    # would redirect token requests to a login page: the endpoint answers 401 itself.
    csrf_exempt = True
    login_required = False

    def __init__(self, view: View, methods: Mapping[str, Permissions]) -> None:
        functools.update_wrapper(self, view)
        self.view = view
        self.methods = dict(methods)
        if "GET" in self.methods:
            self.methods.setdefault("HEAD", self.methods["GET"])

    def __call__(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        by_token = False
        try:
            by_token = self.authenticate(request)
            self.check(request, by_token=by_token)
            for name, values in request.GET.lists():
                for text in (name, *values):
                    refuse_unstorable_text(text, f"query parameter {name!r:.40}")
            for name, value in kwargs.items():
                if isinstance(value, str):
                    refuse_unstorable_text(value, f"{name} in the path")
                elif isinstance(value, int) and value > MAX_ID:
                    raise ApiError(404, f"No row has the {name} {value}.")
            response = self.view(request, *args, **kwargs)
        except ApiError as exc:
            response = exc.response()
        if request.method in ("GET", "HEAD") and not by_token:
            get_token(request)
        add_never_cache_headers(response)
        return response

    def authenticate(self, request: HttpRequest) -> bool:
        """Act as the user of the request's API token, if it sends one; return whether it does.
        Raises ``ApiError`` (401) for a bad token."""
        try:
            return token_auth.authenticate(request)
        except token_auth.Unauthenticated as exc:
            raise unauthenticated(exc.message, exc.challenge) from None

    def check(self, request: HttpRequest, *, by_token: bool = False) -> None:
        """Raise the ``ApiError`` refusing ``request``, if any."""
        user = getattr(request, "user", None)
        if user is None or not user.is_authenticated:
            raise unauthenticated(
                "Authentication required: log in as a staff user, or send an API token as "
                "Authorization: Bearer <token>."
            )
        if not permissions.is_operator(user):
            raise ApiError(403, "The django_iq API is for staff users only.")
        if not by_token and request.method not in ("GET", "HEAD", "OPTIONS", "TRACE"):
            reason = token_auth.csrf_problem(request)
            if reason is not None:
                raise csrf_refusal(reason)
        if request.method not in self.methods:
            allowed = ", ".join(sorted(self.methods))
            error = ApiError(405, f"Method {request.method} is not allowed here; use {allowed}.")
            error.details["allowed"] = sorted(self.methods)
            raise error
        needed = permissions.missing(user, self.methods[request.method])
        if needed:
            raise ApiError(
                403,
                f"{request.method} {request.path} needs the {permissions.named(needed)} "
                f"permission{'s' if len(needed) > 1 else ''}.",
            )


def endpoint(**methods: Permissions) -> Callable[[View], Endpoint]:
    """Make ``view`` an ``Endpoint`` answering ``methods``: ``GET=permissions.ENTRIES`` (staff
    with every permission named) or ``GET=()`` (any active staff user)."""
    wanted = {method.upper(): tuple(needed) for method, needed in methods.items()}

    def decorate(view: View) -> Endpoint:
        return Endpoint(view, wanted)

    return decorate


def read_json_object(request: HttpRequest, example: str) -> dict[str, Any]:
    """Return the request's JSON body, which must be an object; raise ``ApiError`` (400)
    saying what was sent and showing ``example`` otherwise."""
    content_type = request.content_type or ""
    if content_type != "application/json":
        raise ApiError(
            400,
            f"Send a JSON body with Content-Type: application/json (got {content_type or 'none'!r}), "
            f"for example {example}.",
        )
    try:
        body = json.loads(request.body or b"null")
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ApiError(
            400, f"The body is not valid JSON ({exc}); send for example {example}."
        ) from exc
    except RecursionError:
        raise ApiError(400, f"The body is nested too deeply; send for example {example}.") from None
    except ValueError as exc:  # an integer of more digits than Python converts (4300)
        raise ApiError(
            400, f"The body has an integer too long to read ({exc}); send for example {example}."
        ) from None
    if not isinstance(body, dict):
        raise ApiError(
            400, f"The body must be a JSON object, got {type(body).__name__}: send {example}."
        )
    _check_body(body, "body", 0)
    return body


def refuse_unstorable_text(text: str, where: str) -> None:
    """Raise ``ApiError`` (400) if ``text`` has a NUL or a lone surrogate: no database column
    stores it, and a query with it fails in the driver."""
    problem = text_problem(text)
    if problem is not None:
        raise ApiError(400, f"The {where} {problem}; send text without it.")


def _check_body(value: Any, path: str, depth: int) -> None:
    if depth > MAX_BODY_DEPTH:
        raise ApiError(400, f"The body is nested more than {MAX_BODY_DEPTH} levels at {path}.")
    if isinstance(value, str):
        refuse_unstorable_text(value, f"value at {path}")
    elif isinstance(value, dict):
        for key, item in value.items():
            refuse_unstorable_text(key, f"key {key!r:.40} at {path}")
            _check_body(item, f"{path}.{key}", depth + 1)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _check_body(item, f"{path}[{index}]", depth + 1)


def read_ids(value: Any, name: str = "ids") -> list[int]:
    """Return ``value`` as a list of distinct ids (order kept), from 1 to MAX_IDS of them;
    raise ``InvalidParameter`` or ``ApiError`` (400) otherwise."""
    if not isinstance(value, list) or not value:
        raise InvalidParameter(name, value, f"a non-empty list of at most {MAX_IDS} ids")
    if len(value) > MAX_IDS:
        raise ApiError(400, f"{name!r} has {len(value)} ids; send at most {MAX_IDS} per request.")
    for index, item in enumerate(value):
        if isinstance(item, bool) or not isinstance(item, int) or not 1 <= item <= MAX_ID:
            raise InvalidParameter(f"{name}[{index}]", item, "a positive integer id")
    return list(dict.fromkeys(value))


def refuse_unknown_keys(body: Mapping[str, Any], allowed: tuple[str, ...]) -> None:
    """Raise ``ApiError`` (400) naming the keys of ``body`` not in ``allowed``."""
    unknown = sorted(set(body) - set(allowed))
    if unknown:
        raise ApiError(
            400,
            f"Unknown field(s) {', '.join(map(repr, unknown))} in the body; "
            f"accepted: {', '.join(allowed)}.",
        )

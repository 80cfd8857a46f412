"""Authentication by ``Authorization: Bearer <token>``: API tokens for the API and the
metrics, and the metrics' own token. A request sending the header is judged by its token alone,
never by its session, so that a bad token is refused even in a signed-in browser.
"""

from __future__ import annotations

import hmac
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.middleware.csrf import CsrfViewMiddleware

from django_iq.exceptions import IQError
from django_iq.models import ApiToken

# The answer's WWW-Authenticate header on a 401 (RFC 6750).
CHALLENGE = 'Bearer realm="django_iq"'
INVALID_CHALLENGE = 'Bearer realm="django_iq", error="invalid_token"'
REFUSED_MESSAGE = "Invalid, expired or revoked token."


class Unauthenticated(IQError):
    """No usable credentials: answered 401 with ``challenge`` as ``WWW-Authenticate``."""

    def __init__(self, message: str, challenge: str = CHALLENGE) -> None:
        super().__init__(message)
        self.message = message
        self.challenge = challenge


def bearer_token(request: HttpRequest) -> str | None:
    """The token of the request's ``Authorization: Bearer`` header; None without a header of
    that scheme. Raises ``Unauthenticated`` for a Bearer header without a token."""
    scheme, _, token = request.headers.get("Authorization", "").strip().partition(" ")
    if scheme.lower() != "bearer":
        return None
    token = token.strip()
    if not token:
        raise Unauthenticated(REFUSED_MESSAGE, INVALID_CHALLENGE)
    return token


def authenticate(request: HttpRequest) -> bool:
    """Make ``request.user`` the user of the request's API token, if it sends one; return
    whether it did. Raises ``Unauthenticated`` for a token that is unknown, revoked, expired or
    of an inactive user (one answer for all, so a caller learns nothing about which)."""
    token = bearer_token(request)
    if token is None:
        return False
    found = ApiToken.objects.authenticate(token)
    if found is None:
        raise Unauthenticated(REFUSED_MESSAGE, INVALID_CHALLENGE)
    request.user = found.user
    return True


def matches(given: str, expected: Any) -> bool:
    """Compare two tokens in constant time, so that response times say nothing about how much
    of a guess matched."""
    return hmac.compare_digest(given.encode("utf-8", "surrogatepass"), str(expected).encode())


def _unused_view(request: HttpRequest) -> HttpResponse:
    """The middleware's view and next handler: never called by a check."""
    return HttpResponse(status=500)


class _CsrfCheck(CsrfViewMiddleware):
    def _reject(self, request: HttpRequest, reason: str) -> Any:
        return reason


def csrf_problem(request: HttpRequest) -> str | None:
    """Why ``request`` fails Django's CSRF check, or None: what ``CsrfViewMiddleware`` would
    say, for views exempt from it that check session requests themselves."""
    check = _CsrfCheck(_unused_view)
    check.process_request(request)
    reason = check.process_view(request, _unused_view, (), {})
    return reason if isinstance(reason, str) else None

"""API tokens: made, checked and revoked here. Only a SHA-256 hash of each token is stored,
with a short prefix to tell tokens apart; the token itself is shown once, when it is made.

A token is 32 random bytes (``secrets.token_urlsafe``), so a hash without a salt is enough: no
guess of such a token is cheaper than the brute force a salt would guard against.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.db import models, transaction
from django.db.models import Q
from django.utils import timezone

from django_iq.bounds import text_problem
from django_iq.exceptions import InvalidApiToken

if TYPE_CHECKING:
    from django_iq.models import ApiToken

# Every token starts with this, so that secret scanners and people can recognise one.
TOKEN_MARK = "iq_"  # noqa: S105 (a public marker, not a secret)
# Characters of the token kept in clear to identify it in lists ("iq_3kf9Qa1Z").
PREFIX_LENGTH = len(TOKEN_MARK) + 8
TOKEN_BYTES = 32
NAME_MAX_LENGTH = 100
# A token's last use is written at most this often, so a busy script does not write per request.
LAST_USED_PRECISION = timedelta(minutes=1)
# A new token can be shown (``unseal``) this long after it was made, and no longer.
SHOW_WITHIN = timedelta(minutes=10)


def hash_token(token: str) -> str:
    """The SHA-256 hex digest stored in place of ``token``."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


class ApiTokenQuerySet(models.QuerySet["ApiToken"]):
    def usable(self, now: datetime) -> ApiTokenQuerySet:
        """Tokens neither revoked nor expired at ``now``."""
        return self.filter(revoked_at__isnull=True).filter(
            Q(expires_at__isnull=True) | Q(expires_at__gt=now)
        )


class ApiTokenManager(models.Manager["ApiToken"]):
    def get_queryset(self) -> ApiTokenQuerySet:
        return ApiTokenQuerySet(self.model, using=self._db)

    def usable(self, now: datetime) -> ApiTokenQuerySet:
        return self.get_queryset().usable(now)

    def issue(
        self, user: Any, name: str, *, expires_at: datetime | None = None
    ) -> tuple[ApiToken, str]:
        """Make a token acting as ``user``; return its row and the token, which is not stored
        and cannot be read again.

        Raises ``InvalidApiToken`` for an empty or too long name, a user who is unsaved, not
        active or not staff (the API refuses everyone else, so their token would be useless),
        or an expiry in the past.
        """
        validate_name(name)
        validate_user(user)
        if expires_at is not None and expires_at <= timezone.now():
            raise InvalidApiToken(
                f"The expiry {expires_at.isoformat()} is in the past; give a later time or none."
            )
        token = TOKEN_MARK + secrets.token_urlsafe(TOKEN_BYTES)
        row = self.create(
            name=name,
            user_pk=str(user.pk),
            prefix=token[:PREFIX_LENGTH],
            token_hash=hash_token(token),
            expires_at=expires_at,
        )
        return row, token

    def authenticate(self, token: str, now: datetime | None = None) -> ApiToken | None:
        """Return the usable token ``token`` is, with its user loaded, or None; record its use
        when the last one recorded is older than ``LAST_USED_PRECISION``. A token lends its
        user's rights, so a user no longer active or no longer staff makes the token unusable
        (None, with no use recorded), as if it were unknown."""
        now = now or timezone.now()
        if not token.startswith(TOKEN_MARK) or text_problem(token):
            return None
        found = self.usable(now).filter(token_hash=hash_token(token)).first()
        user = found.user if found is not None else None
        if found is None or user is None or not user.is_active or not user.is_staff:
            return None
        stale = now - LAST_USED_PRECISION
        if found.last_used_at is None or found.last_used_at <= stale:
            # Conditional, so that concurrent requests of one script write it once.
            self.filter(pk=found.pk).filter(
                Q(last_used_at__isnull=True) | Q(last_used_at__lte=stale)
            ).update(last_used_at=now)
            found.last_used_at = now
        return found

    def seal(self, row: ApiToken, token: str, now: datetime | None = None) -> str:
        """Keep ``token`` for one showing within ``SHOW_WITHIN``; return the half to keep
        elsewhere (a random pad, hex), for ``unseal``.

        The row keeps the token XOR the pad, the caller the pad (the admin: its maker's
        session): neither half alone says anything of the token, and the row's half is cleared
        when the token is shown or, past ``SHOW_WITHIN``, by the leader's pruning, so a session
        kept for weeks (or a signed session cookie) holds nothing usable.
        """
        raw = token.encode()
        pad = secrets.token_bytes(len(raw))
        sealed = bytes(a ^ b for a, b in zip(raw, pad, strict=True)).hex()
        until = (now or timezone.now()) + SHOW_WITHIN
        self.filter(pk=row.pk).update(sealed=sealed, sealed_until=until)
        return pad.hex()

    def unseal(self, row_id: int, pad: str, now: datetime | None = None) -> str | None:
        """The token ``seal`` kept on row ``row_id``, once: the row's half is cleared whatever
        comes of it. None when it was shown already, is past ``SHOW_WITHIN`` or ``pad`` is not
        its other half."""
        now = now or timezone.now()
        with transaction.atomic(using=self.db):
            found = (
                self.select_for_update()
                .filter(pk=row_id)
                .exclude(sealed="")
                .values_list("sealed", "sealed_until", "token_hash")
                .first()
            )
            if found is None:
                return None
            self.filter(pk=row_id).update(sealed="", sealed_until=None)
        sealed, until, token_hash = found
        try:
            raw = bytes(
                a ^ b for a, b in zip(bytes.fromhex(sealed), bytes.fromhex(pad), strict=True)
            )
            token = raw.decode()
        except (ValueError, TypeError):
            return None
        if until is None or until <= now or hash_token(token) != token_hash:
            return None
        return token

    def drop_seals(self, now: datetime, batch_size: int) -> int:
        """Clear up to ``batch_size`` rows' halves of tokens not shown within ``SHOW_WITHIN``;
        return how many."""
        ids = list(
            self.exclude(sealed="")
            .filter(Q(sealed_until__isnull=True) | Q(sealed_until__lte=now))
            .values_list("pk", flat=True)[:batch_size]
        )
        return self.filter(pk__in=ids).update(sealed="", sealed_until=None) if ids else 0

    def revoke_for_user(self, user_pk: Any, now: datetime | None = None) -> int:
        """Revoke the tokens of a user who was deleted; return how many."""
        rows = self.filter(user_pk=str(user_pk), revoked_at__isnull=True)
        return rows.update(revoked_at=now or timezone.now())

    def revoke(
        self, ids: Iterable[int], now: datetime | None = None
    ) -> tuple[list[int], list[int]]:
        """Revoke the tokens of ``ids``; return (revoked now, already revoked). Ids of no
        token are in neither list."""
        now = now or timezone.now()
        wanted = sorted(set(ids))
        before = dict(self.filter(pk__in=wanted).values_list("pk", "revoked_at"))
        fresh = [pk for pk in wanted if pk in before and before[pk] is None]
        self.filter(pk__in=fresh, revoked_at__isnull=True).update(revoked_at=now)
        return fresh, [pk for pk in wanted if before.get(pk) is not None]


def validate_name(name: Any) -> None:
    """Raise ``InvalidApiToken`` unless ``name`` is a non-empty storable string of at most
    ``NAME_MAX_LENGTH`` characters."""
    if not isinstance(name, str) or not name.strip():
        raise InvalidApiToken(f"A token needs a name saying what uses it (got {name!r}).")
    if len(name) > NAME_MAX_LENGTH:
        raise InvalidApiToken(
            f"The token name has {len(name)} characters; use at most {NAME_MAX_LENGTH}."
        )
    problem = text_problem(name)
    if problem is not None:
        raise InvalidApiToken(f"The token name {problem}; use plain text.")


def validate_user(user: Any) -> None:
    """Raise ``InvalidApiToken`` unless ``user`` may use the API: saved, active and staff."""
    if user is None or user.pk is None:
        raise InvalidApiToken(f"A token acts as a saved user; {user!r} is not one.")
    name = user.get_username()
    if not user.is_active:
        raise InvalidApiToken(
            f"User {name!r} is not active, and a token acts as an active staff user. "
            "Pick another user, or activate this one first."
        )
    if not getattr(user, "is_staff", False):
        raise InvalidApiToken(
            f"User {name!r} is not staff: the django_iq API is for staff users only, so their "
            "token would be refused. Pick a staff user, or give this one staff status first."
        )

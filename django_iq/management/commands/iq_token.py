"""``manage.py iq_token create|list|revoke``: API tokens for scripts and CI. ``create`` prints
the token once (only its hash is stored); like every ``iq_*`` command it runs with the rights
of whoever can run ``manage.py``, so it may make a token for any active staff user (the API
refuses everyone else, so ``create`` refuses them too)."""

from __future__ import annotations

import argparse
from datetime import timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from django_iq import operations
from django_iq.exceptions import InvalidApiToken
from django_iq.management.argtypes import add_ids_option, whole
from django_iq.management.output import format_time, render_table
from django_iq.models import ApiToken

COMMAND = "iq_token"


class Command(BaseCommand):
    help = "Create, list and revoke django_iq API tokens (sent as Authorization: Bearer)."

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
        create = actions.add_parser(
            "create", help="Make a token for a user and print it once (only its hash is kept)."
        )
        create.add_argument("--user", required=True, help="Username the token acts as.")
        create.add_argument("--name", required=True, help="What uses the token, e.g. nightly-ci.")
        create.add_argument(
            "--expires-in-days",
            type=whole(1, 36_500),
            metavar="DAYS",
            help="Refuse the token after this many days (default: never).",
        )
        listing = actions.add_parser("list", help="List tokens: id, name, user, prefix, status.")
        listing.add_argument("--user", help="Only this user's tokens.")
        revoke = actions.add_parser("revoke", help="Revoke tokens by id.")
        add_ids_option(revoke, "Token ids, as iq_token list shows them (repeatable).")

    def handle(self, *args: Any, **options: Any) -> None:
        action = options["action"]
        if action == "create":
            self._create(options)
        elif action == "list":
            self._list(options.get("user"))
        else:
            outcome = operations.revoke_tokens(options["ids"], operations.Actor.of_command(COMMAND))
            if options["verbosity"]:
                self.stdout.write(outcome.message)

    def _create(self, options: dict[str, Any]) -> None:
        users = get_user_model()._default_manager
        user = users.filter(**{users.model.USERNAME_FIELD: options["user"]}).first()
        if user is None:
            raise CommandError(f"No user is named {options['user']!r}; create the user first.")
        days = options.get("expires_in_days")
        expires_at = timezone.now() + timedelta(days=days) if days else None
        try:
            _row, token = operations.issue_token(
                user, options["name"], operations.Actor.of_command(COMMAND), expires_at=expires_at
            )
        except InvalidApiToken as exc:
            raise CommandError(str(exc)) from exc
        # Only the token on stdout, so that a script can capture it: TOKEN=$(... iq_token create).
        self.stdout.write(token)

    def _list(self, username: str | None) -> None:
        rows = ApiToken.objects.order_by("pk")
        if username is not None:
            users = get_user_model()._default_manager
            found = users.filter(**{get_user_model().USERNAME_FIELD: username}).first()
            rows = rows.filter(user_pk=str(found.pk)) if found is not None else rows.none()
        now = timezone.now()
        table = [
            (
                row.pk,
                row.name,
                row.user.get_username()
                if row.user is not None
                else f"(deleted user {row.user_pk})",
                row.prefix,
                row.status(now),
                format_time(row.last_used_at) if row.last_used_at else "never",
            )
            for row in rows
        ]
        self.stdout.write(
            render_table(("id", "name", "user", "prefix", "status", "last used"), table)
        )

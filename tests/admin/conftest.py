"""Helpers shared by the admin tests (``tests/admin``) and the operations tests that go
through the admin: URLs, signed-in clients with given permissions, actions run as the action
bar runs them, and what a page or the admin log shows."""

from __future__ import annotations

import html
import re
from collections.abc import Sequence
from typing import Any

from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission, User
from django.contrib.messages import get_messages
from django.db.models import Model
from django.http import HttpResponse
from django.test import Client
from django.urls import reverse


def changelist_url(model: type[Model]) -> str:
    return reverse(f"admin:django_iq_{model._meta.model_name}_changelist")


def change_url(obj: Model) -> str:
    return reverse(f"admin:django_iq_{obj._meta.model_name}_change", args=[obj.pk])


def login(client: Client, *codenames: str, username: str = "operator") -> Client:
    """Log ``client`` in as a staff user holding exactly the django_iq ``codenames``."""
    user = User.objects.create_user(username, password="unused", is_staff=True)
    user.user_permissions.add(
        *Permission.objects.filter(content_type__app_label="django_iq", codename__in=codenames)
    )
    assert user.user_permissions.count() == len(codenames), f"unknown codename in {codenames}"
    client.force_login(user)
    return client


def login_superuser(client: Client) -> Client:
    client.force_login(User.objects.create_superuser("root", password="unused"))
    return client


def offered_actions(client: Client, model: type[Model]) -> set[str]:
    response = client.get(changelist_url(model))
    assert response.status_code == 200
    form = response.context["action_form"]  # None when no action is available at all
    return {name for name, _ in form.fields["action"].choices if name} if form else set()


def run_action(
    client: Client, model: type[Model], action: str, objects: Sequence[Model], **extra: str
) -> HttpResponse:
    """Post ``action`` on ``objects`` from the changelist, as the action bar does."""
    data: dict[str, Any] = {
        "action": action,
        "index": "0",  # the action bar's "Go" button
        "_selected_action": [o.pk for o in objects],
    }
    response: HttpResponse = client.post(changelist_url(model), {**data, **extra})
    return response


def messages_of(response: HttpResponse) -> list[str]:
    return [str(message) for message in get_messages(response.wsgi_request)]


def column(response: HttpResponse, name: str) -> list[str]:
    """The text of each changelist cell of column ``name``, top to bottom."""
    cells = re.findall(
        rf'<t[dh] class="field-{re.escape(name)}[^"]*">(.*?)</t[dh]>',
        response.content.decode(),
        re.S,
    )
    return [" ".join(html.unescape(re.sub(r"<[^>]+>", " ", cell)).split()) for cell in cells]


def listed_ids(response: HttpResponse) -> list[int]:
    return [obj.pk for obj in response.context["cl"].result_list]


def log_entries(flag: int | None = None) -> list[LogEntry]:
    rows = LogEntry.objects.order_by("pk")
    if flag is not None:
        rows = rows.filter(action_flag=flag)
    return list(rows)

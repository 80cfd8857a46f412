"""API tokens: made with only their hash stored, shown once in the admin, used as a Bearer
token instead of a session (without CSRF), their last use written at most once a minute,
refused once revoked or expired, and managed with ``iq_token``."""

from __future__ import annotations

import io
import json
import time
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.core.management import CommandError, call_command
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from django_iq import operations
from django_iq.admin import tokens as tokens_admin
from django_iq.admin.tokens import SESSION_KEY
from django_iq.duties.pruning import PruningDuty
from django_iq.exceptions import InvalidApiToken
from django_iq.leader import Leader
from django_iq.managers.tokens import LAST_USED_PRECISION, hash_token
from django_iq.models import ApiToken, Entry, OperatorAction
from tests.factories import EntryFactory

pytestmark = pytest.mark.django_db

QUEUES = "/iq/api/queues/"
CANCEL = "/iq/api/entries/cancel/"
ADD_URL = reverse("admin:django_iq_apitoken_add")
LIST_URL = reverse("admin:django_iq_apitoken_changelist")


def staff(name: str, *codenames: str, **fields: bool) -> User:
    user = User.objects.create_user(name, is_staff=True, **fields)
    user.user_permissions.add(
        *Permission.objects.filter(content_type__app_label="django_iq", codename__in=codenames)
    )
    return user


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


# -- made, stored, shown ----------------------------------------------------------------------


def test_only_the_hash_and_a_short_prefix_of_a_token_are_stored() -> None:
    row, token = ApiToken.objects.issue(staff("ci"), "nightly")

    row.refresh_from_db()
    assert token.startswith("iq_") and len(token) > 40
    assert row.token_hash == hash_token(token) and len(row.token_hash) == 64
    assert row.prefix == token[:11]
    stored = json.dumps(list(ApiToken.objects.values()), default=str)
    assert token not in stored and token[11:] not in stored


@pytest.mark.parametrize(
    ("name", "message"),
    [("", "needs a name"), ("x" * 101, "at most 100"), ("a\x00b", "NUL")],
)
def test_a_bad_name_is_refused_and_nothing_is_written(name: str, message: str) -> None:
    with pytest.raises(InvalidApiToken, match=message):
        ApiToken.objects.issue(staff("ci"), name)

    assert not ApiToken.objects.exists()


def test_a_token_for_an_inactive_user_or_expiring_in_the_past_is_refused() -> None:
    with pytest.raises(InvalidApiToken, match="'gone' is not active"):
        ApiToken.objects.issue(staff("gone", is_active=False), "ci")
    with pytest.raises(InvalidApiToken, match="in the past"):
        ApiToken.objects.issue(staff("ci"), "ci", expires_at=timezone.now() - timedelta(1))

    assert not ApiToken.objects.exists()


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"is_staff": False}, "User 'alice' is not staff: the django_iq API is for staff users"),
        ({"is_active": False}, "User 'alice' is not active"),
    ],
)
def test_issuing_a_token_to_a_user_who_cannot_use_the_api_is_refused_and_writes_nothing(
    fields: dict[str, bool], message: str
) -> None:
    alice = User.objects.create_user("alice", **{"is_staff": True, **fields})
    actor = operations.Actor.of_command("iq_token")

    with pytest.raises(InvalidApiToken, match=message):
        operations.issue_token(alice, "ci", actor)

    assert not ApiToken.objects.exists()
    assert not OperatorAction.objects.exists()


def test_the_admin_shows_a_new_token_once_and_audits_it(client: Client) -> None:
    root = User.objects.create_superuser("root")
    robot = staff("robot")
    client.force_login(root)

    posted = client.post(ADD_URL, {"name": "nightly-ci", "user": robot.pk})

    row = ApiToken.objects.get()
    issued_url = reverse("admin:django_iq_apitoken_issued", args=[row.pk])
    assert (posted.status_code, posted["Location"]) == (302, issued_url)
    shown = client.get(issued_url)
    token = shown.context["token"]
    assert (row.name, row.user, row.token_hash) == ("nightly-ci", robot, hash_token(token))
    assert token in shown.content.decode()
    assert "no-store" in shown["Cache-Control"]
    breadcrumbs = shown.content.decode().split('class="breadcrumbs"')[1].split("</div>")[0]
    assert "Job queue" in breadcrumbs and "API tokens" in breadcrumbs
    # A reload (the browser's, of the page the redirect led to) shows it no more, makes none.
    reloaded = client.get(issued_url)
    later = (
        reloaded.content.decode()
        + client.get(LIST_URL).content.decode()
        + client.get(reverse("admin:django_iq_apitoken_change", args=[row.pk])).content.decode()
    )
    assert reloaded.status_code == 200 and "is not shown again" in reloaded.content.decode()
    assert (shown.content + reloaded.content).decode().count(token) == 1
    assert row.prefix in later and token not in later
    assert token not in json.dumps(dict(client.session.items()))
    assert ApiToken.objects.count() == 1
    audit = OperatorAction.objects.get()
    assert (audit.door, audit.action, audit.actor) == ("admin", "issue_token", "root")


def test_the_page_of_a_new_token_is_only_for_those_who_see_the_token(client: Client) -> None:
    maker = staff("maker", "add_apitoken", "view_apitoken")
    row, _token = ApiToken.objects.issue(staff("other"), "theirs")
    client.force_login(maker)

    response = client.get(reverse("admin:django_iq_apitoken_issued", args=[row.pk]))

    assert response.status_code == 404


def test_a_maker_with_only_the_add_permission_sees_the_new_token_once(client: Client) -> None:
    maker = staff("maker", "add_apitoken")
    client.force_login(maker)

    posted = client.post(ADD_URL, {"name": "deploys", "user": maker.pk})
    shown = client.get(posted["Location"])
    reloaded = client.get(posted["Location"])

    row = ApiToken.objects.get()
    assert shown.status_code == 200 and row.token_hash == hash_token(shown.context["token"])
    # Nothing waits for a page this user could not open: the reload finds no token and no row
    # the user may view.
    assert reloaded.status_code == 404
    assert not client.session.get(SESSION_KEY)


def test_a_new_token_not_shown_in_time_is_dropped_from_the_session_unseen(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = User.objects.create_superuser("root")
    client.force_login(root)
    made_at = time.time()
    monkeypatch.setattr(tokens_admin.time, "time", lambda: made_at)
    posted = client.post(ADD_URL, {"name": "late", "user": root.pk})
    assert list(client.session[SESSION_KEY]) == [str(ApiToken.objects.get().pk)]

    monkeypatch.setattr(
        tokens_admin.time, "time", lambda: made_at + tokens_admin.SHOW_WITHIN_SECONDS + 1
    )
    late = client.get(posted["Location"])

    assert late.status_code == 200 and late.context["token"] is None
    assert "is not shown again" in late.content.decode()
    assert client.session[SESSION_KEY] == {}


def test_a_waiting_token_is_split_between_its_row_and_the_session_and_gone_after_ten_minutes(
    client: Client,
) -> None:
    root = User.objects.create_superuser("root")
    client.force_login(root)
    posted = client.post(ADD_URL, {"name": "never-opened", "user": root.pk})
    row = ApiToken.objects.get()
    session = json.dumps(dict(client.session.items()))
    pad = client.session[SESSION_KEY][str(row.pk)][0]
    token = bytes(
        a ^ b for a, b in zip(bytes.fromhex(row.sealed), bytes.fromhex(pad), strict=True)
    ).decode()
    assert hash_token(token) == row.token_hash
    # Neither the session nor the row holds the token, or any part of it after its mark.
    for half in (session, row.sealed, pad):
        assert token[len("iq_") :][:8] not in half
    assert row.sealed_until is not None

    # The maker never opens the page; ten minutes on, the leader's pruning clears the row's
    # half, and the session's half is of no use any more.
    later = row.sealed_until + timedelta(seconds=1)
    pruned = Leader(name="pruner", duties=[PruningDuty()], lease_seconds=30).run_once(later)
    assert pruned.ran["pruning"].token_seals == 1
    row.refresh_from_db()
    assert (row.sealed, row.sealed_until) == ("", None)
    assert ApiToken.objects.unseal(row.pk, pad) is None
    opened = client.get(posted["Location"])
    assert opened.context["token"] is None and token not in opened.content.decode()


def test_a_token_is_unsealed_once_in_time_and_only_with_its_own_half() -> None:
    row, token = ApiToken.objects.issue(staff("robot"), "ci")
    made = timezone.now()
    pad = ApiToken.objects.seal(row, token, now=made)
    other_row, other_token = ApiToken.objects.issue(staff("robot2"), "ci")
    other_pad = ApiToken.objects.seal(other_row, other_token, now=made)

    assert ApiToken.objects.unseal(row.pk, other_pad) is None, "the wrong half shows nothing"
    assert ApiToken.objects.unseal(row.pk, pad) is None, "and the try used the row's half up"
    late = made + timedelta(minutes=10)
    assert ApiToken.objects.unseal(other_row.pk, other_pad, now=late) is None
    fresh = ApiToken.objects.seal(row, token, now=made)
    assert ApiToken.objects.unseal(row.pk, fresh, now=made + timedelta(minutes=9)) == token
    assert ApiToken.objects.unseal(row.pk, fresh, now=made) is None, "shown once"


def test_in_the_admin_a_user_who_is_not_superuser_makes_tokens_only_for_themselves(
    client: Client,
) -> None:
    maker = staff("maker", "add_apitoken", "view_apitoken")
    other = staff("other")
    client.force_login(maker)

    refused = client.post(ADD_URL, {"name": "ci", "user": other.pk})
    accepted = client.post(ADD_URL, {"name": "ci", "user": maker.pk})

    assert refused.status_code == 200 and "user" in refused.context["adminform"].form.errors
    assert accepted.status_code == 302
    assert [row.user.get_username() for row in ApiToken.objects.all()] == ["maker"]


def test_the_admin_form_offers_and_accepts_only_active_staff_users(client: Client) -> None:
    client.force_login(User.objects.create_superuser("root"))
    customer = User.objects.create_user("customer")
    gone = staff("gone", is_active=False)

    form_page = client.get(ADD_URL)
    refused = [client.post(ADD_URL, {"name": "ci", "user": user.pk}) for user in (customer, gone)]

    field = form_page.context["adminform"].form.fields["user"]
    assert list(field.queryset) == [User.objects.get(username="root")]
    # The user is picked by id, with the admin's user list narrowed to active staff as lookup.
    html = form_page.content.decode()
    assert 'class="vForeignKeyRawIdAdminField"' in html
    assert "is_staff__exact=1" in html and "is_active__exact=1" in html
    for response in refused:
        assert response.status_code == 200
        assert response.context["adminform"].form.errors["user"] == [
            "Pick an active staff user: the django_iq API is for staff users only, so a token "
            "of this user would be refused."
        ]
    assert not ApiToken.objects.exists()


def test_an_expiry_in_the_past_is_a_form_error_in_the_admin(client: Client) -> None:
    client.force_login(User.objects.create_superuser("root"))

    response = client.post(
        ADD_URL,
        {
            "name": "ci",
            "user": staff("robot").pk,
            "expires_at_0": "2001-01-01",
            "expires_at_1": "00:00:00",
        },
    )

    assert "expires_at" in response.context["adminform"].form.errors
    assert not ApiToken.objects.exists()


# -- used -------------------------------------------------------------------------------------


def test_a_token_acts_with_its_users_permissions(client: Client) -> None:
    _row, token = ApiToken.objects.issue(staff("robot", "view_queue"), "ci")

    assert client.get(QUEUES, headers=bearer(token)).status_code == 200
    refused = client.get("/iq/api/entries/", headers=bearer(token))
    assert refused.status_code == 403
    assert "django_iq.view_entry" in refused.json()["error"]


@pytest.mark.parametrize(
    "header", ["Bearer iq_nothing", "Bearer ", "Bearer not-a-token", "bearer iq_\x7f"]
)
def test_a_bad_token_is_401_with_a_challenge_and_nothing_else(client: Client, header: str) -> None:
    response = client.get(QUEUES, headers={"Authorization": header})

    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Bearer")
    assert response.json() == {"error": "Invalid, expired or revoked token."}


@pytest.mark.parametrize("case", ["revoked", "expired", "inactive user", "user not staff"])
def test_a_revoked_or_expired_token_or_one_of_an_inactive_or_non_staff_user_is_401_unrecorded(
    client: Client, case: str
) -> None:
    user = staff("robot", "view_queue")
    row, token = ApiToken.objects.issue(user, "ci", expires_at=timezone.now() + timedelta(1))
    assert client.get(QUEUES, headers=bearer(token)).status_code == 200
    ApiToken.objects.filter(pk=row.pk).update(last_used_at=None)
    if case == "revoked":
        ApiToken.objects.revoke([row.pk])
    elif case == "expired":
        ApiToken.objects.filter(pk=row.pk).update(expires_at=timezone.now())
    elif case == "inactive user":
        User.objects.filter(pk=user.pk).update(is_active=False)
    else:
        User.objects.filter(pk=user.pk).update(is_staff=False)

    response = client.get(QUEUES, headers=bearer(token))

    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Bearer")
    assert response.json() == {"error": "Invalid, expired or revoked token."}
    assert ApiToken.objects.get(pk=row.pk).last_used_at is None, "a refused use is not a use"


def test_a_token_wins_over_the_session_cookie_it_travels_with(client: Client) -> None:
    client.force_login(User.objects.create_superuser("root"))

    response = client.get(QUEUES, headers=bearer("iq_stolen-or-mistyped"))

    assert response.status_code == 401, "a bad token must not fall back to the session"


def test_last_use_is_written_at_most_once_a_minute() -> None:
    row, token = ApiToken.objects.issue(staff("robot"), "ci")
    start = timezone.now()

    ApiToken.objects.authenticate(token, now=start)
    ApiToken.objects.authenticate(token, now=start + LAST_USED_PRECISION / 2)
    row.refresh_from_db()
    assert row.last_used_at == start
    ApiToken.objects.authenticate(token, now=start + LAST_USED_PRECISION)
    row.refresh_from_db()
    assert row.last_used_at == start + LAST_USED_PRECISION


def test_a_request_records_the_use_and_the_next_one_in_the_minute_writes_nothing(
    client: Client, django_assert_num_queries: Any
) -> None:
    row, token = ApiToken.objects.issue(staff("robot"), "ci")

    # The token, its user (read apart: the users may live in another database), then the
    # write of its use (the description needs no permission, so no permission is read);
    # within the minute, the token and its user.
    with django_assert_num_queries(3):
        assert client.get("/iq/api/openapi.json", headers=bearer(token)).status_code == 200
    row.refresh_from_db()
    assert row.last_used_at is not None
    with django_assert_num_queries(2):
        assert client.get("/iq/api/openapi.json", headers=bearer(token)).status_code == 200


# -- CSRF -------------------------------------------------------------------------------------


def test_a_token_request_needs_no_csrf_token_and_gets_no_cookie() -> None:
    client = Client(enforce_csrf_checks=True)
    entry = EntryFactory()
    _row, token = ApiToken.objects.issue(staff("robot", "cancel_entry"), "ci")

    response = client.post(
        CANCEL, {"ids": [entry.pk]}, content_type="application/json", headers=bearer(token)
    )

    assert response.status_code == 200
    assert not Entry.objects.exists()
    assert "csrftoken" not in client.get(QUEUES, headers=bearer(token)).cookies


def test_a_session_request_still_needs_its_csrf_token() -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(staff("operator", "cancel_entry"))
    entry = EntryFactory()

    refused = client.post(CANCEL, {"ids": [entry.pk]}, content_type="application/json")

    assert refused.status_code == 403
    assert "CSRF verification failed" in refused.json()["error"]
    assert Entry.objects.filter(pk=entry.pk).exists()


# -- revoked ----------------------------------------------------------------------------------


def test_the_admin_revokes_through_the_operations_layer_and_audits_it(client: Client) -> None:
    row, _token = ApiToken.objects.issue(staff("robot", "view_queue"), "ci")
    client.force_login(staff("security", "change_apitoken", "view_apitoken"))
    mine, _ = ApiToken.objects.issue(User.objects.get(username="security"), "mine")

    response = client.post(
        LIST_URL,
        {"action": "revoke_tokens", "index": "0", "_selected_action": [row.pk, mine.pk]},
    )

    assert response.status_code == 302
    # Another user's token is not even listed to a user who is not superuser.
    assert ApiToken.objects.get(pk=row.pk).revoked_at is None
    assert ApiToken.objects.get(pk=mine.pk).revoked_at is not None
    audit = OperatorAction.objects.get(action="revoke_token")
    assert (audit.door, audit.done, audit.actor) == ("admin", 1, "security")
    assert audit.message == f"Revoked 1 API token: {mine}."


def test_revoking_needs_the_change_permission_in_the_admin(client: Client) -> None:
    user = staff("viewer", "view_apitoken")
    row, _token = ApiToken.objects.issue(user, "ci")
    client.force_login(user)

    client.post(LIST_URL, {"action": "revoke_tokens", "index": "0", "_selected_action": [row.pk]})

    assert ApiToken.objects.get().revoked_at is None
    assert not OperatorAction.objects.filter(action="revoke_token").exists()


# -- iq_token ---------------------------------------------------------------------------------


def test_iq_token_creates_lists_and_revokes(client: Client) -> None:
    staff("ci-robot", "view_queue")
    out = io.StringIO()

    call_command("iq_token", "create", "--user", "ci-robot", "--name", "nightly", stdout=out)
    token = out.getvalue().strip()
    assert client.get(QUEUES, headers=bearer(token)).status_code == 200
    listing = io.StringIO()
    call_command("iq_token", "list", stdout=listing)
    row = ApiToken.objects.get()
    assert row.prefix in listing.getvalue() and token not in listing.getvalue()
    assert "active" in listing.getvalue()

    revoked = io.StringIO()
    call_command("iq_token", "revoke", "--id", str(row.pk), "999", stdout=revoked)

    assert revoked.getvalue().strip() == f"Revoked 1 API token: {row}. Not found: 999."
    assert client.get(QUEUES, headers=bearer(token)).status_code == 401
    assert list(OperatorAction.objects.values_list("door", "action").order_by("pk")) == [
        ("command", "issue_token"),
        ("command", "revoke_token"),
    ]


def test_iq_token_create_refuses_an_unknown_user_or_a_bad_name() -> None:
    staff("ci-robot")

    with pytest.raises(CommandError, match="No user is named 'nobody'"):
        call_command("iq_token", "create", "--user", "nobody", "--name", "ci")
    with pytest.raises(CommandError, match="at most 100"):
        call_command("iq_token", "create", "--user", "ci-robot", "--name", "x" * 101)

    assert not ApiToken.objects.exists()


def test_iq_token_create_refuses_a_user_who_is_not_active_staff() -> None:
    User.objects.create_user("alice")
    staff("bob", is_active=False)

    with pytest.raises(CommandError, match="'alice' is not staff: the django_iq API is for staff"):
        call_command("iq_token", "create", "--user", "alice", "--name", "ci")
    with pytest.raises(CommandError, match="'bob' is not active"):
        call_command("iq_token", "create", "--user", "bob", "--name", "ci")

    assert not ApiToken.objects.exists()
    assert not OperatorAction.objects.exists()


def test_a_deleted_users_tokens_are_revoked_and_refused(client: Client) -> None:
    robot = staff("robot")
    row, token = ApiToken.objects.issue(robot, "ci")
    other, _ = ApiToken.objects.issue(staff("other"), "ci")

    robot.delete()

    row.refresh_from_db()
    assert row.revoked_at is not None and row.user is None
    assert client.get("/iq/api/queues/", headers=bearer(token)).status_code == 401
    other.refresh_from_db()
    assert other.revoked_at is None, "only the deleted user's"

"""The ApiToken admin: a token is made with the add form and shown once on the page the form
redirects to (only its hash is stored in the table; until that page shows it, ten minutes at
most, the token waits split in two halves, one on its row and one in its maker's session, neither
of use alone, so reloading the page neither shows it again nor makes another), listed with its prefix, last use, expiry and revocation, and revoked with an
action through ``operations.revoke_tokens``. Each page is read-only once made."""

from __future__ import annotations

import time
from typing import Any

from django import forms
from django.contrib import admin
from django.contrib.admin.utils import flatten_fieldsets
from django.contrib.admin.widgets import ForeignKeyRawIdWidget
from django.contrib.auth import get_user_model
from django.db import router
from django.db.models import CASCADE, ForeignKey, ForeignObjectRel, QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.cache import add_never_cache_headers
from django.utils.safestring import SafeString

from django_iq import audit, operations, permissions
from django_iq.admin.common import (
    IQModelAdmin,
    admin_actor,
    cut,
    cut_column,
    report_outcome,
    time_column,
)
from django_iq.managers.tokens import SHOW_WITHIN
from django_iq.models import ApiToken

# Where save_model leaves the new token for response_add: on the object, never in the database.
TOKEN_ATTRIBUTE = "_iq_plain_token"  # noqa: S105 (an attribute name)
# Where response_add leaves the session's half of new tokens (see ApiToken.objects.seal), by
# row id, for the one page that shows and forgets them.
SESSION_KEY = "django_iq_new_tokens"
# A new token not shown within this time is dropped from the session unseen (the page then says
# so); its row's half is cleared then too (by the page, or the leader's pruning).
SHOW_WITHIN_SECONDS = int(SHOW_WITHIN.total_seconds())


def waiting_tokens(request: HttpRequest) -> dict[str, list[Any]]:
    """The session's halves of new tokens still to be shown, by row id, as ``[pad, made_at]``; those
    past ``SHOW_WITHIN_SECONDS`` (or of an older shape) are dropped from the session."""
    waiting = request.session.get(SESSION_KEY, {})
    now = time.time()
    kept = {
        pk: value
        for pk, value in waiting.items()
        if isinstance(value, list)
        and len(value) == 2
        and isinstance(value[1], int | float)
        and now - value[1] < SHOW_WITHIN_SECONDS
    }
    if kept != waiting:
        request.session[SESSION_KEY] = kept
    return kept


class StaffUserRawIdWidget(ForeignKeyRawIdWidget):
    """The user's id, with the admin's lookup of users narrowed to active staff when the user
    admin lets the list be filtered so (Django's own UserAdmin does)."""

    def __init__(self, rel: Any, admin_site: admin.AdminSite, request: HttpRequest) -> None:
        super().__init__(rel, admin_site)
        user_admin = admin_site._registry.get(rel.model)
        self.staff_filters = {
            lookup: "1"
            for lookup in ("is_staff__exact", "is_active__exact")
            if user_admin is not None and user_admin.lookup_allowed(lookup, "1", request)
        }

    def url_parameters(self) -> dict[str, str]:
        return {**super().url_parameters(), **self.staff_filters}


class ApiTokenForm(forms.ModelForm):
    """The token's name and expiry; ``user`` (a user's id, checked against active staff) is
    added by ``ApiTokenAdmin.get_form``, for the request."""

    class Meta:
        model = ApiToken
        fields = ("name", "expires_at")

    def clean_expires_at(self) -> Any:
        expires_at = self.cleaned_data.get("expires_at")
        if expires_at is not None and expires_at <= timezone.now():
            raise forms.ValidationError("Give a time in the future, or leave empty.")
        return expires_at


def user_relation() -> ForeignObjectRel:
    """The relation the admin's raw-id widget looks users up through: a token refers to its
    user by primary key only (the users may live in another database)."""
    model = get_user_model()
    relation = ForeignKey(model, on_delete=CASCADE).remote_field
    relation.field_name = model._meta.pk.name
    return relation


@admin.register(ApiToken)
class ApiTokenAdmin(IQModelAdmin):
    form = ApiTokenForm
    list_display = (
        "token_name",
        "user_name",
        "prefix",
        "status",
        "created",
        "last_used",
        "expires",
    )
    list_filter = ("revoked_at",)
    search_fields = ("name", "prefix")
    actions = ("revoke_tokens",)
    readonly_fields = ("prefix", "created_at", "last_used_at", "revoked_at")
    token_name = cut_column("name", "name", "narrow")
    created = time_column("created_at", "created")
    last_used = time_column("last_used_at", "last used")
    expires = time_column("expires_at", "expires")

    @admin.display(description="user", ordering="user_pk")
    def user_name(self, row: ApiToken) -> SafeString | str:
        user = row.user
        return cut(
            user.get_username() if user is not None else f"(deleted {row.user_pk})", "narrow"
        )

    def get_queryset(self, request: HttpRequest) -> QuerySet[ApiToken]:
        rows = super().get_queryset(request)
        # Only a superuser sees and revokes other users' tokens.
        return rows if request.user.is_superuser else rows.filter(user_pk=str(request.user.pk))

    def get_fields(self, request: HttpRequest, obj: ApiToken | None = None) -> Any:
        if obj is None:
            return ("name", "user", "expires_at")
        return ("name", "user", "prefix", "created_at", "last_used_at", "expires_at", "revoked_at")

    def get_form(
        self, request: HttpRequest, obj: ApiToken | None = None, change: bool = False, **kwargs: Any
    ) -> Any:
        # "user" is no field of the model (a token keeps its user's primary key): the page
        # shows it read-only, or, on the add page, as the field made below.
        shown = flatten_fieldsets(self.get_fieldsets(request, obj))
        fields = [name for name in shown if name != "user"]
        form = super().get_form(request, obj, change, **{**kwargs, "fields": fields})
        if obj is not None:
            return form
        # The user field is made for this request: a superuser may pick any active staff user,
        # anyone else only themselves.
        return type(form.__name__, (form,), {"user": self._user_field(request)})

    def _user_field(self, request: HttpRequest) -> forms.ModelChoiceField:
        model = get_user_model()
        # The API is for active staff only: a token of anyone else would be refused.
        users = model._default_manager.db_manager(router.db_for_read(model)).filter(
            is_active=True, is_staff=True
        )
        options: dict[str, Any] = {}
        if request.user.is_superuser:
            # Any active staff user, picked by id with the admin's lookup, as a select of every
            # staff user would be long.
            options["widget"] = StaffUserRawIdWidget(user_relation(), self.admin_site, request)
        else:
            # A token acts with its user's permissions: making one for someone else would lend
            # their rights. Only a superuser, who holds them all, may.
            users = users.filter(pk__in=[request.user.pk])
            options["initial"] = request.user.pk
            options["widget"] = forms.Select
        return forms.ModelChoiceField(
            queryset=users,
            help_text="An active staff user: the API refuses everyone else.",
            error_messages={
                "invalid_choice": "Pick an active staff user: the django_iq API is for staff "
                "users only, so a token of this user would be refused."
            },
            **options,
        )

    def has_change_permission(self, request: HttpRequest, obj: ApiToken | None = None) -> bool:
        # The list's change permission allows revoking; a token's page is read-only.
        return obj is None and super().has_change_permission(request, obj)

    def has_delete_permission(self, request: HttpRequest, obj: ApiToken | None = None) -> bool:
        # Revoked tokens stay listed, saying who could use the API until when.
        return False

    @admin.display(description="status")
    def status(self, row: ApiToken) -> str:
        return row.status()

    def save_model(
        self, request: HttpRequest, obj: ApiToken, form: forms.ModelForm[ApiToken], change: bool
    ) -> None:
        if change:  # pages are read-only: nothing to save
            return
        # The form has refused what issue_token would (no name, a user who is not active staff,
        # a past expiry).
        row, token = operations.issue_token(
            form.cleaned_data["user"], obj.name, admin_actor(request), expires_at=obj.expires_at
        )
        obj.pk, obj.prefix, obj.token_hash, obj.created_at = (
            row.pk,
            row.prefix,
            row.token_hash,
            row.created_at,
        )
        setattr(obj, TOKEN_ATTRIBUTE, token)

    def response_add(
        self, request: HttpRequest, obj: ApiToken, post_url_continue: str | None = None
    ) -> HttpResponse:
        """Keep the new token for one showing (its row holds one half, the session the other)
        and redirect to the page showing it (post/redirect/get: reloading that page posts
        nothing)."""
        waiting = waiting_tokens(request)
        pad = ApiToken.objects.seal(obj, getattr(obj, TOKEN_ATTRIBUTE))
        waiting[str(obj.pk)] = [pad, time.time()]
        request.session[SESSION_KEY] = waiting
        return HttpResponseRedirect(
            reverse(f"{self.admin_site.name}:django_iq_apitoken_issued", args=[obj.pk])
        )

    def get_urls(self) -> list[URLPattern]:
        # Before the default routes, whose "<path:object_id>/" would take this one.
        return [
            path(
                "<int:token_id>/issued/",
                self.admin_site.admin_view(self.issued_view),
                name="django_iq_apitoken_issued",
            ),
            *super().get_urls(),
        ]

    def issued_view(self, request: HttpRequest, token_id: int) -> HttpResponse:
        """Show a new token once: popped from the session, so a reload says it was shown. Its
        maker sees it with the add permission alone; otherwise the page needs the view one."""
        row = self.get_queryset(request).filter(pk=token_id).first()
        waiting = waiting_tokens(request)
        made_here = row is not None and str(row.pk) in waiting
        allowed = row is not None and (
            (made_here and self.has_add_permission(request))
            or self.has_view_or_change_permission(request, row)
        )
        if row is None or not allowed:
            raise Http404("No such API token.")
        token = None
        if made_here:
            token = ApiToken.objects.unseal(row.pk, waiting.pop(str(row.pk))[0])
            request.session[SESSION_KEY] = waiting
        context = {
            **self.admin_site.each_context(request),
            "title": "API token made" if token else "API token already shown",
            "opts": self.opts,
            "token_row": row,
            "token": token,
            "can_view": self.has_view_or_change_permission(request, row),
            "show_within_minutes": SHOW_WITHIN_SECONDS // 60,
            "change_url": reverse(
                f"{self.admin_site.name}:django_iq_apitoken_change", args=[row.pk]
            ),
            "changelist_url": reverse(f"{self.admin_site.name}:django_iq_apitoken_changelist"),
        }
        response = TemplateResponse(request, "admin/django_iq/apitoken/issued.html", context)
        add_never_cache_headers(response)
        return response

    def has_revoke_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(permissions.REVOKE_TOKEN)

    @admin.action(description="Revoke selected API tokens", permissions=["revoke"])
    def revoke_tokens(self, request: HttpRequest, queryset: QuerySet[ApiToken]) -> None:
        rows = {row.pk: row for row in queryset}
        outcome = operations.revoke_tokens(list(rows), admin_actor(request))
        revoked = [row for row in rows.values() if str(row) in set(outcome.done)]
        audit.admin_log(admin_actor(request), revoked, "change", "Revoked the API token.")
        report_outcome(self, request, outcome)

"""The admin refuses filters no database column holds as it refuses any bad filter, never
with a 500."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

pytestmark = pytest.mark.django_db

LISTS = ["entry", "entryerror", "queue", "worker", "cronjob", "grouplock", "runoutcome"]


@pytest.mark.parametrize("model", LISTS)
@pytest.mark.parametrize("params", [{"q": "a\x00b"}, {"job_name": "a\x00"}, {"a\x00": "1"}])
def test_a_filter_with_a_nul_character_is_refused_like_any_bad_filter(
    model: str, params: dict[str, str]
) -> None:
    client = Client(raise_request_exception=False)
    client.force_login(User.objects.create_superuser("root"))
    response = client.get(f"/admin/django_iq/{model}/", params)
    assert response.status_code in (200, 302), response.status_code
    if response.status_code == 302:
        assert response["Location"].endswith("?e=1")

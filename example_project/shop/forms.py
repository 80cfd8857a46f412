"""The page's form: which kind of job to enqueue, how many, and the options of that kind."""

from __future__ import annotations

from typing import Any

from django import forms

from shop.enqueueing import CUSTOMERS

KINDS = {
    "report": "CPU-bound: build reports (SHA-256 chains)",
    "email": "Slow I/O: send receipt emails",
    "payment": "Retrying: charge cards that are declined first",
    "loyalty": "Grouped: add loyalty points for one customer",
}


class EnqueueForm(forms.Form):
    kind = forms.ChoiceField(choices=list(KINDS.items()), widget=forms.RadioSelect)
    count = forms.IntegerField(
        min_value=1, max_value=500, initial=10, help_text="How many jobs (1 to 500)."
    )
    customer = forms.ChoiceField(
        choices=[("", "---"), *((c, c) for c in CUSTOMERS)],
        required=False,
        help_text="Loyalty points only: whose account. Its jobs share one group key.",
    )
    declines = forms.IntegerField(
        min_value=0,
        max_value=5,
        required=False,
        initial=1,
        help_text="Payments only: declines before the charge goes through. Each charge has 3 "
        "attempts, so 3 or more make it fail for good.",
    )

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        kind = cleaned.get("kind")
        if kind == "loyalty" and not cleaned.get("customer"):
            self.add_error(
                "customer",
                forms.ValidationError("Choose the customer whose points to add.", code="required"),
            )
        if kind == "payment" and cleaned.get("declines") is None:
            self.add_error(
                "declines",
                forms.ValidationError(
                    "Say how many times each card is declined (0 to 5).", code="required"
                ),
            )
        return cleaned

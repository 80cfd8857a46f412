"""The shop's one page: a form that enqueues jobs, the queues' state and the latest results."""

from __future__ import annotations

import random

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

from django_iq.models import Queue
from shop.enqueueing import (
    Plan,
    enqueue_emails,
    enqueue_payments,
    enqueue_points,
    enqueue_reports,
)
from shop.forms import EnqueueForm
from shop.jobs import add_points, build_report, charge_card, send_receipt
from shop.models import LoyaltyAccount, Payment, Report, SentEmail

WEB_BATCH = "web"
QUEUE_OF = {
    "report": build_report.options.queue_name,
    "email": send_receipt.options.queue_name,
    "payment": charge_card.options.queue_name,
    "loyalty": add_points.options.queue_name,
}


@require_http_methods(["GET", "POST"])
def index(request: HttpRequest) -> HttpResponse:
    """Show the form; on a valid POST enqueue the jobs, say so, and redirect back here."""
    form = EnqueueForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        kind, count = form.cleaned_data["kind"], form.cleaned_data["count"]
        plan = Plan(WEB_BATCH)
        rng = random.Random()
        if kind == "report":
            enqueue_reports(plan, count, rng)
        elif kind == "email":
            enqueue_emails(plan, count, rng)
        elif kind == "payment":
            enqueue_payments(plan, count, rng, declines=form.cleaned_data["declines"])
        else:
            enqueue_points(plan, form.cleaned_data["customer"], count, rng)
        messages.success(
            request,
            f"Enqueued {plan.describe()} on queue {QUEUE_OF[kind]!r}. "
            "A worker runs them: python manage.py runworker",
        )
        return redirect("index")
    context = {
        "form": form,
        "stats": Queue.objects.stats(),
        "reports": Report.objects.all()[:5],
        "emails": SentEmail.objects.all()[:5],
        "payments": Payment.objects.all()[:5],
        "accounts": LoyaltyAccount.objects.filter(batch=WEB_BATCH),
        "counts": {
            "reports": Report.objects.count(),
            "emails": SentEmail.objects.count(),
            "paid": Payment.objects.filter(status=Payment.Status.PAID).count(),
            "payments": Payment.objects.count(),
        },
    }
    return render(request, "shop/index.html", context)

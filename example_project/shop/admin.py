"""Admin pages for the shop's results."""

from django.contrib import admin

from shop.models import LoyaltyAccount, Payment, Report, SentEmail


@admin.register(Report)
class ReportAdmin(admin.ModelAdmin):
    list_display = ("name", "batch", "iterations", "digest", "seconds", "created_at")
    list_filter = ("batch",)


@admin.register(SentEmail)
class SentEmailAdmin(admin.ModelAdmin):
    list_display = ("subject", "recipient", "batch", "delivery_ms", "sent_at")
    list_filter = ("batch",)


@admin.register(Payment)
class PaymentAdmin(admin.ModelAdmin):
    list_display = ("reference", "customer", "amount_cents", "status", "attempts", "declines")
    list_filter = ("status", "batch")
    search_fields = ("reference", "customer")


@admin.register(LoyaltyAccount)
class LoyaltyAccountAdmin(admin.ModelAdmin):
    list_display = ("customer", "batch", "points", "updates")
    list_filter = ("batch",)

"""``manage.py iq_cancel --id N...``: delete waiting entries; entries being run are refused."""

from __future__ import annotations

import argparse
from typing import Any

from django.core.management.base import BaseCommand

from django_iq import operations
from django_iq.management.argtypes import add_ids_option


class Command(BaseCommand):
    help = (
        "Cancel django_iq entries by id: waiting or deferred entries are deleted; entries a "
        "worker is running are skipped."
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        add_ids_option(parser, "Entry ids (repeatable: --id 1 2 --id 3).")

    def handle(self, *args: Any, **options: Any) -> None:
        outcome = operations.cancel(options["ids"], operations.Actor.of_command("iq_cancel"))
        if options["verbosity"]:
            self.stdout.write(outcome.message)

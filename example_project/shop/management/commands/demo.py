"""``manage.py demo``: migrate, enqueue a mixed batch of jobs, work it off, print a summary."""

from __future__ import annotations

import argparse
import random
from typing import Any

from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError

from django_iq.models import Queue
from shop.demo import clear_demo_results, new_batch, queued_from_earlier_runs, run_batch
from shop.enqueueing import Plan, enqueue_mix
from shop.summary import outcome_problems, queue_table, results


def positive_int(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {value!r}") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be greater than zero, got {number}")
    return number


def positive_float(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {value!r}") from None
    if number <= 0:
        raise argparse.ArgumentTypeError(f"must be greater than zero, got {number}")
    return number


class Command(BaseCommand):
    help = (
        "Migrate, enqueue a batch of CPU-bound, slow I/O, retrying and grouped jobs, run a worker "
        "in this process until they are done, and print a summary. Exits 1 unless every job "
        "finished with the expected result."
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--count", type=positive_int, default=200, help="Jobs to enqueue (default 200)."
        )
        parser.add_argument(
            "--threads", type=positive_int, default=4, help="Processing threads (default 4)."
        )
        parser.add_argument(
            "--timeout-seconds",
            type=positive_float,
            default=300.0,
            help="Give up after this long (default 300).",
        )
        parser.add_argument("--seed", type=int, help="Seed for the jobs' random arguments.")

    def handle(self, *args: Any, **options: Any) -> None:
        verbosity: int = options["verbosity"]
        self.stdout.write("Migrating the database...")
        call_command("migrate", interactive=False, verbosity=max(0, verbosity - 1))
        cleared = clear_demo_results()
        if cleared:
            self.stdout.write(f"Cleared {cleared} result rows of earlier demo runs.")

        plan = Plan(new_batch())
        enqueue_mix(plan, options["count"], random.Random(options["seed"]))
        self.stdout.write(f"Enqueued {plan.total} jobs ({plan.describe()}) as batch {plan.batch}.")
        leftover = queued_from_earlier_runs(plan.batch)
        if leftover:
            self.stdout.write(
                f"{leftover} entries of an earlier, unfinished demo run are queued too; "
                "the worker runs them alongside."
            )
        self.stdout.write(
            f"Running a worker with {options['threads']} threads until they are done:"
        )

        outcome = run_batch(
            plan,
            self.stdout,
            threads=options["threads"],
            timeout_seconds=options["timeout_seconds"],
            verbosity=verbosity,
        )
        if outcome.has_leader:
            self.stdout.write("(A leader ran alongside: promotion, recovery, cron and pruning.)")

        self.stdout.write("\nQueues (Queue.objects.stats()):")
        for line in queue_table(Queue.objects.stats()):
            self.stdout.write("  " + line)
        lines, problems = results(plan)
        self.stdout.write(f"\nResults of batch {plan.batch}:")
        for line in lines:
            self.stdout.write("  " + line)
        self.stdout.write("")

        # Missing results are expected when the run did not finish; report only why it did not.
        problems = outcome_problems(plan, outcome) or problems
        if problems:
            raise CommandError("The demo did not finish cleanly:\n- " + "\n- ".join(problems))
        self.stdout.write(
            self.style.SUCCESS(
                f"All {plan.total} job{'s' if plan.total != 1 else ''} finished in "
                f"{outcome.seconds:.1f} s. To enqueue more from "
                "a web page: python example_project/manage.py runserver, open "
                "http://127.0.0.1:8000/ and run a worker: python example_project/manage.py "
                "runworker"
            )
        )

import datetime

from django.db import migrations, models

EARLIEST = datetime.datetime(1900, 1, 1, tzinfo=datetime.UTC)
LATEST = datetime.datetime(9000, 1, 1, tzinfo=datetime.UTC)


def move_times_into_range(apps, schema_editor):
    """Entries stored with a run_at no database driver reads back (year 1 or 9999 with an
    offset, on PostgreSQL) are moved to the nearest bound, so the constraint can be added and
    every reader works again. Compared in SQL: such rows cannot be loaded into Python."""
    Entry = apps.get_model("django_iq", "Entry")
    db = schema_editor.connection.alias
    Entry.objects.using(db).filter(run_at__lt=EARLIEST).update(run_at=EARLIEST)
    Entry.objects.using(db).filter(run_at__gt=LATEST).update(run_at=LATEST)


class Migration(migrations.Migration):
    dependencies = [
        ("django_iq", "0003_worker_died"),
    ]

    operations = [
        migrations.RunPython(move_times_into_range, migrations.RunPython.noop, elidable=True),
        migrations.AddConstraint(
            model_name="entry",
            constraint=models.CheckConstraint(
                condition=models.Q(("run_at__gte", EARLIEST), ("run_at__lte", LATEST)),
                name="iq_entry_run_at_range",
            ),
        ),
    ]

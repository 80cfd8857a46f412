import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_iq", "0005_operatoraction"),
    ]

    # The new index first: on MariaDB the queue's foreign key needs an index leading with it
    # before its own can go.
    operations = [
        migrations.AddIndex(
            model_name="entry",
            index=models.Index(
                fields=["queue", "state", "-priority", "id"], name="iq_entry_queue_state_idx"
            ),
        ),
        migrations.AlterField(
            model_name="entry",
            name="queue",
            field=models.ForeignKey(
                db_column="queue",
                db_index=False,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="entries",
                to="django_iq.queue",
                to_field="name",
            ),
        ),
        migrations.RemoveIndex(model_name="entry", name="iq_entry_state_idx"),
    ]

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_iq", "0006_entry_claim_order_index"),
    ]

    operations = [
        migrations.AddField(
            model_name="entry",
            name="snoozes",
            field=models.PositiveIntegerField(
                db_default=0,
                default=0,
                help_text="Runs that raised Snooze: put back without counting an attempt.",
            ),
        ),
    ]

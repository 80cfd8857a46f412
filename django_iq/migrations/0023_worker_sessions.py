from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_iq", "0022_cron_ended"),
    ]

    operations = [
        migrations.AddField(
            model_name="worker",
            name="sessions",
            field=models.JSONField(blank=True, db_default=[], default=list),
        ),
    ]

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_iq", "0007_entry_snoozes"),
    ]

    operations = [
        migrations.AddField(
            model_name="worker",
            name="job_names",
            field=models.JSONField(blank=True, db_default=[], default=list),
        ),
    ]

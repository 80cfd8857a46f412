from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_iq", "0008_worker_job_names"),
    ]

    operations = [
        migrations.AddField(
            model_name="entry",
            name="unique_key",
            field=models.CharField(blank=True, max_length=200, null=True, unique=True),
        ),
    ]

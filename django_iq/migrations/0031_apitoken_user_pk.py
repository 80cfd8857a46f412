"""API tokens refer to their user by primary key (``ApiToken.user_pk``), not by a foreign key:
django_iq's tables may live in a database of their own (``DJANGO_IQ["DATABASE"]``), without
the users' table. Existing tokens keep their user."""

from django.db import migrations, models
from django.db.models.functions import Cast


def copy_user_ids(apps, schema_editor):
    tokens = apps.get_model("django_iq", "ApiToken")._base_manager.db_manager(
        schema_editor.connection.alias
    )
    tokens.update(user_pk=Cast("user_id", models.CharField(max_length=64)))


class Migration(migrations.Migration):
    dependencies = [
        ("django_iq", "0030_limits_per_key"),
    ]

    operations = [
        migrations.AddField(
            model_name="apitoken",
            name="user_pk",
            field=models.CharField(db_index=True, default="", editable=False, max_length=64),
            preserve_default=False,
        ),
        migrations.RunPython(copy_user_ids, migrations.RunPython.noop, elidable=True),
        migrations.RemoveField(
            model_name="apitoken",
            name="user",
        ),
    ]

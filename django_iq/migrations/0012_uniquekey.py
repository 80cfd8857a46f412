from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('django_iq', '0011_job_limits'),
    ]

    operations = [
        migrations.CreateModel(
            name='UniqueKey',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('key', models.CharField(max_length=200, unique=True)),
                ('expires_at', models.DateTimeField(blank=True, null=True)),
                ('window', models.DurationField()),
            ],
            options={
                'indexes': [models.Index(fields=['expires_at'], name='iq_uniquekey_expires_idx')],
            },
        ),
    ]

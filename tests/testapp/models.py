"""Models the test jobs write to, so tests can see what ran, when and how often."""

from django.db import models


class JobRun(models.Model):
    """One run of a test job; ``token`` is unique so a second run of the same entry fails loudly."""

    token = models.CharField(max_length=100, unique=True)
    group_key = models.CharField(max_length=100, blank=True)
    started_at = models.FloatField(default=0)
    finished_at = models.FloatField(default=0)
    pid = models.IntegerField(default=0)

    def __str__(self) -> str:
        return self.token


class RecordedRun(models.Model):
    """One run of the fault suite's ``recorded`` job, written by the job itself: a row at its
    start (committed at once) and its end time when it returns. A run whose process was killed
    keeps ``finished_at`` empty."""

    token = models.CharField(max_length=100, db_index=True)
    group_key = models.CharField(max_length=100, blank=True)
    pid = models.IntegerField()
    host = models.CharField(max_length=100, blank=True)
    started_at = models.FloatField()
    finished_at = models.FloatField(null=True)

    def __str__(self) -> str:
        return f"{self.token} pid={self.pid}"


class Export(models.Model):
    """A user's export, as an application keeps it: whose it is, and the entry doing it (the
    progress recipe of docs/howto/progress.md)."""

    owner = models.ForeignKey("auth.User", on_delete=models.CASCADE, related_name="exports")
    entry_id = models.BigIntegerField(null=True)

    def __str__(self) -> str:
        return f"export {self.pk} of {self.owner_id}"

"""On PostgreSQL, the outcome records' table becomes partitioned by range of ``finished_at``
(django_iq/partitions.py). The records already kept stay where they are: the old table becomes
the first partition (up to the next partition boundary after its newest record and after now),
dropped by the leader once all of it is past the retention; no row is copied. A default
partition takes any row no range covers. The primary key becomes (id, finished_at), as
PostgreSQL requires of a partitioned table; ids stay unique, drawn from one sequence.

Other databases keep the table as it is. The reverse migration copies the records back into a
plain table."""

from datetime import UTC, datetime

from django.db import migrations

TABLE = "django_iq_runoutcome"
LEGACY = f"{TABLE}_legacy"
DEFAULT = f"{TABLE}_default"
PKEY = f"{TABLE}_pkey"
# The first partition boundary: the partitions the leader creates next are this wide.
WIDTH_SECONDS = 3600


def _fetch(cursor, sql, params=()):
    cursor.execute(sql, params)
    return cursor.fetchall()


def _indexes(cursor, table):
    """(name, definition) of the table's indexes other than its primary key."""
    return _fetch(
        cursor,
        "SELECT c.relname, pg_get_indexdef(i.indexrelid) FROM pg_index i "
        "JOIN pg_class c ON c.oid = i.indexrelid "
        "WHERE i.indrelid = to_regclass(%s) AND NOT i.indisprimary ORDER BY c.relname",
        [table],
    )


def _is_partitioned(cursor):
    return bool(
        _fetch(
            cursor, "SELECT 1 FROM pg_partitioned_table WHERE partrelid = to_regclass(%s)", [TABLE]
        )
    )


def _last_id(cursor):
    """The highest id the outcome table's sequence gave or its rows hold."""
    ((sequence,),) = _fetch(cursor, "SELECT pg_get_serial_sequence(%s, 'id')", [TABLE])
    ((last,),) = _fetch(
        cursor,
        "SELECT GREATEST(COALESCE(pg_sequence_last_value(%s), 0), "
        "COALESCE((SELECT max(id) FROM django_iq_runoutcome), 0))",
        [sequence],
    )
    return last


def _name_sequence(cursor, last_id):
    """Give the id column's sequence the name Django gives it, and go on after ``last_id``."""
    ((sequence,),) = _fetch(cursor, "SELECT pg_get_serial_sequence(%s, 'id')", [TABLE])
    cursor.execute(f"ALTER SEQUENCE {sequence} RENAME TO {TABLE}_id_seq")
    cursor.execute(f"SELECT setval('{TABLE}_id_seq', %s + 1, false)", [last_id])


def partition(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    with schema_editor.connection.cursor() as cursor:
        if _is_partitioned(cursor):
            return
        indexes = _indexes(cursor, TABLE)
        ((newest,),) = _fetch(cursor, "SELECT max(finished_at) FROM django_iq_runoutcome")
        last_id = _last_id(cursor)
        cursor.execute(f"ALTER TABLE {TABLE} RENAME TO {LEGACY}")
        cursor.execute(f"ALTER TABLE {LEGACY} DROP CONSTRAINT {PKEY}")
        for name, _ in indexes:
            cursor.execute(f"ALTER INDEX {name} RENAME TO {name[:48]}_legacy")
        cursor.execute(
            f"CREATE TABLE {TABLE} (LIKE {LEGACY} INCLUDING DEFAULTS INCLUDING CONSTRAINTS "
            "INCLUDING IDENTITY) PARTITION BY RANGE (finished_at)"
        )
        cursor.execute(f"ALTER TABLE {LEGACY} ALTER COLUMN id DROP IDENTITY")
        _name_sequence(cursor, last_id)
        cursor.execute(f"ALTER TABLE {TABLE} ADD CONSTRAINT {PKEY} PRIMARY KEY (id, finished_at)")
        for _, definition in indexes:
            cursor.execute(definition)  # names the table by its name: the partitioned one now
        cursor.execute(f"CREATE TABLE {DEFAULT} PARTITION OF {TABLE} DEFAULT")
        if newest is None:
            cursor.execute(f"DROP TABLE {LEGACY}")
            return
        latest = max(newest, datetime.now(UTC)).timestamp()
        bound = datetime.fromtimestamp(latest - latest % WIDTH_SECONDS + WIDTH_SECONDS, tz=UTC)
        cursor.execute(
            f"ALTER TABLE {LEGACY} ADD CONSTRAINT {LEGACY}_range CHECK (finished_at < %s)", [bound]
        )
        cursor.execute(
            f"ALTER TABLE {TABLE} ATTACH PARTITION {LEGACY} FOR VALUES FROM (MINVALUE) TO (%s)",
            [bound],
        )


def unpartition(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    with schema_editor.connection.cursor() as cursor:
        if not _is_partitioned(cursor):
            return
        indexes = _indexes(cursor, TABLE)
        last_id = _last_id(cursor)
        plain = f"{TABLE}_plain"
        cursor.execute(
            f"CREATE TABLE {plain} (LIKE {TABLE} INCLUDING DEFAULTS INCLUDING CONSTRAINTS "
            "INCLUDING IDENTITY)"
        )
        cursor.execute("INSERT INTO django_iq_runoutcome_plain SELECT * FROM django_iq_runoutcome")
        cursor.execute(f"DROP TABLE {TABLE} CASCADE")
        cursor.execute(f"ALTER TABLE {plain} RENAME TO {TABLE}")
        _name_sequence(cursor, last_id)
        cursor.execute(f"ALTER TABLE {TABLE} ADD CONSTRAINT {PKEY} PRIMARY KEY (id)")
        for _, definition in indexes:
            cursor.execute(definition.replace(" ON ONLY ", " ON "))


class Migration(migrations.Migration):
    dependencies = [
        ("django_iq", "0031_apitoken_user_pk"),
    ]

    operations = [
        migrations.RunPython(partition, unpartition, elidable=False),
    ]

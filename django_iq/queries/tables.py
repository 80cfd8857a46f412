"""What a table takes on disk and about how many rows it holds, as the database's catalog says:
read in constant time, whatever the table holds (SQLite's page count apart, see below)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.db import DatabaseError, connections

from django_iq.queries.common import _template

# Bytes on disk (the table, its indexes and TOAST) and the planner's row estimate, over the
# whole partition tree: a partitioned table has no storage of its own, its partitions do.
# pg_partition_tree() lists nothing for a table that is not partitioned, so the table itself
# is added to the tree. reltuples is -1 until a partition is first vacuumed or analyzed (the
# partitions the leader creates ahead, say): those are left out of the sum, which is NULL when
# no partition has an estimate. No row counts when the table does not exist (to_regclass).
TABLE_SIZE_POSTGRESQL = """
WITH tree AS (
    SELECT to_regclass(%s) AS oid
    UNION
    SELECT relid FROM pg_partition_tree(to_regclass(%s))
)
SELECT count(c.oid),
       sum(pg_total_relation_size(c.oid)),
       sum(c.reltuples) FILTER (WHERE c.relkind <> 'p' AND c.reltuples >= 0)::bigint,
       bool_or(c.relkind = 'p')
FROM tree JOIN pg_class c ON c.oid = tree.oid
"""

# InnoDB's own figures, refreshed with its statistics: the row count is an estimate that can
# be off by half, the sizes count whole pages.
TABLE_SIZE_MYSQL = """
SELECT data_length + index_length, table_rows FROM information_schema.tables
WHERE table_schema = DATABASE() AND table_name = %s
"""

# SQLite: the b-trees of a table and of its indexes (automatic ones included).
TABLE_BTREES_SQLITE = (
    "SELECT name FROM sqlite_master WHERE tbl_name = %s AND type IN ('table', 'index')"
)
# The pages of those b-trees, from the dbstat virtual table, one row per b-tree. It walks each
# b-tree's pages, so it costs in proportion to the table; SQLite keeps no cheaper figure.
TABLE_PAGES_SQLITE = "SELECT sum(pgsize) FROM dbstat WHERE aggregate = 1 AND name IN ({names})"


@dataclass(frozen=True)
class TableSize:
    """A table's bytes on disk, indexes included, and its estimated rows; None where the
    database does not say (no ``dbstat`` in this SQLite, no estimate made yet)."""

    size_bytes: int | None
    estimated_rows: int | None
    # PostgreSQL: the table is partitioned (its rows live in partitions).
    is_partitioned: bool = False


def table_size(using: str, table: str) -> TableSize | None:
    """Read ``table``'s size and row estimate on the database ``using``; None when there is
    no such table."""
    connection = connections[using]
    read = _template(_READERS, connection.vendor, "read table sizes")
    with connection.cursor() as cursor:
        return read(connection, cursor, table)


def _postgresql(connection: Any, cursor: Any, table: str) -> TableSize | None:
    name = connection.ops.quote_name(table)
    cursor.execute(TABLE_SIZE_POSTGRESQL, [name, name])
    found, size, rows, partitioned = cursor.fetchone()
    if not found:
        return None
    return TableSize(int(size), _whole(rows), bool(partitioned))


def _mysql(connection: Any, cursor: Any, table: str) -> TableSize | None:
    cursor.execute(TABLE_SIZE_MYSQL, [table])
    row = cursor.fetchone()
    return None if row is None else TableSize(_whole(row[0]), _whole(row[1]))


def _sqlite(connection: Any, cursor: Any, table: str) -> TableSize | None:
    cursor.execute(TABLE_BTREES_SQLITE, [table])
    names = [name for (name,) in cursor.fetchall()]
    if not names:
        return None
    try:
        cursor.execute(TABLE_PAGES_SQLITE.format(names=", ".join(["%s"] * len(names))), names)
    except DatabaseError:
        # An SQLite built without SQLITE_ENABLE_DBSTAT_VTAB has no dbstat table: the size is
        # unknown. A statement that fails leaves SQLite's transaction as it was.
        return TableSize(None, None)
    return TableSize(_whole(cursor.fetchone()[0]), None)


# SQLite keeps no row estimate (sqlite_stat1 only after ANALYZE, which Django never runs), and
# COUNT(*) would read the whole table: its rows are left unknown.
_READERS: dict[str, Callable[[Any, Any, str], TableSize | None]] = {
    "postgresql": _postgresql,
    "mysql": _mysql,
    "sqlite": _sqlite,
}


def _whole(value: Any) -> int | None:
    return None if value is None else int(value)

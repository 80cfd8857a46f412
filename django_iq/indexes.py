"""Index types: partial where the database supports it, plain elsewhere."""

from __future__ import annotations

from typing import Any

from django.db import models
from django.db.models import Q
from django.db.models.sql.query import Query


class PartialIndex(models.Index):
    """An index limited to rows matching ``where`` on databases with partial indexes
    (PostgreSQL, SQLite), and a plain index elsewhere (MariaDB), without Django's warning that
    MariaDB ignores index conditions."""

    def __init__(self, *args: Any, where: Q, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.where = where

    def deconstruct(self) -> Any:
        path, args, kwargs = super().deconstruct()
        kwargs["where"] = self.where
        return path, args, kwargs

    def _get_condition_sql(self, model: Any, schema_editor: Any) -> str | None:
        if not schema_editor.connection.features.supports_partial_indexes:
            return None
        query = Query(model=model, alias_cols=False)
        where = query.build_where(self.where)
        compiler = query.get_compiler(connection=schema_editor.connection)
        sql, params = where.as_sql(compiler, schema_editor.connection)
        return str(sql % tuple(schema_editor.quote_value(p) for p in params))

"""The import rules of docs/architecture.md, read from the source: every import of a django_iq
module, at the top of a file or inside a function (those under ``TYPE_CHECKING`` are for the type
checker alone), runs down the layers or within one, and the modules import each other in no
circle."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "django_iq"

# Bottom to top. A module may import from its own layer and the layers below it, never above.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    (
        "foundation",
        (
            "appmodels",
            "conf",
            "dbconn",
            "exceptions",
            "governor",
            "fencing",
            "group_keys",
            "indexes",
            "bounds",
            "logs",
            "options",
            "permissions",
            "routers",
            "schedule",
            "serialization",
            "signals",
            "states",
            "tasks_compat",
            "tasks_options",
            "tracing",
            "wording",
        ),
    ),
    ("data", ("queries", "managers")),
    ("models", ("models",)),
    ("jobs", ("registry", "batches", "context", "progress_reports", "")),
    (
        "runtime",
        (
            "acks",
            "cancelling",
            "cancels",
            "capacity",
            "compaction",
            "disabled_jobs",
            "duties",
            "inline_runs",
            "leader",
            "limited_claims",
            "partitions",
            "tally",
            "oncommit",
            "process",
            "processing",
            "recycling",
            "reloading",
            "scheduling",
            "stuck",
            "supervisor",
            "timeouts",
            "wait_listener",
            "waiting",
            "wakeup",
            "worker",
        ),
    ),
    (
        "operator",
        (
            "admin",
            "alarms",
            "api",
            "apps",
            "audit",
            "autoscale",
            "backends",
            "token_auth",
            "checks",
            "contrib",
            "dashboard",
            "health",
            "management",
            "prometheus",
            "pytest_plugin",
            "operations",
            "preflight",
            "receivers",
            "snapshot",
            "table_status",
            "testing",
            "templatetags",
            "urls",
        ),
    ),
]


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {
        module_name(path): path for path in PACKAGE.rglob("*.py") if "migrations" not in path.parts
    }


def layer_of(module: str) -> int:
    """The layer of ``django_iq.x.y``: the one listing ``x`` (``""`` is the package itself)."""
    top = module.split(".")[1] if "." in module else ""
    for index, (_, names) in enumerate(LAYERS):
        if top in names:
            return index
    raise AssertionError(f"{module} is in no layer: add it to LAYERS and docs/architecture.md")


def imports_of(path: Path, known: set[str]) -> set[str]:
    """The django_iq modules ``path`` imports at run time (not under ``TYPE_CHECKING``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    type_only = {
        id(node)
        for block in ast.walk(tree)
        if isinstance(block, ast.If) and "TYPE_CHECKING" in ast.unparse(block.test)
        for node in ast.walk(block)
    }
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in type_only:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            targets = [f"{node.module}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            continue
        for target in targets:
            if not target.startswith("django_iq"):
                continue
            while target not in known:  # "django_iq.models.Entry" -> "django_iq.models"
                target = target.rpartition(".")[0]
            found.add(target)
    own = module_name(path) if PACKAGE in path.parents else None
    return found - {own}


def import_graph() -> dict[str, set[str]]:
    found = modules()
    return {name: imports_of(path, set(found)) for name, path in found.items()}


def test_every_module_has_a_layer() -> None:
    assert len(modules()) > 50, f"the package's modules were not found under {PACKAGE}"
    for name in modules():
        layer_of(name)


def test_no_import_runs_up_the_layers() -> None:
    upward = [
        f"{module} ({LAYERS[layer_of(module)][0]}) imports {target} ({LAYERS[layer_of(target)][0]})"
        for module, targets in import_graph().items()
        for target in targets
        if layer_of(target) > layer_of(module)
    ]
    assert upward == []


def test_the_modules_import_each_other_in_no_circle() -> None:
    graph = import_graph()
    # A package's __init__ re-exporting its own modules is not a circle of the code's design.
    edges = {
        module: {t for t in targets if not t.startswith(module + ".")}
        for module, targets in graph.items()
    }
    circles = strongly_connected(edges)
    assert circles == [], f"import circles: {circles}"


def strongly_connected(edges: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm: the groups of two or more modules that reach each other."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(edges.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return groups


@pytest.mark.parametrize(
    ("edges", "circles"),
    [
        ({"a": {"b"}, "b": {"c"}, "c": set()}, []),
        ({"a": {"b"}, "b": {"a"}}, [["a", "b"]]),
        ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, [["a", "b", "c"]]),
    ],
)
def test_the_circle_finder_finds_circles(
    edges: dict[str, set[str]], circles: list[list[str]]
) -> None:
    assert strongly_connected(edges) == circles


def test_a_function_level_import_counts(tmp_path: Path) -> None:
    source = tmp_path / "sample.py"
    source.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from django_iq.worker import WorkerProcess\n"
        "def f():\n    from django_iq.models import Entry\n",
        encoding="utf-8",
    )
    known = {"django_iq", "django_iq.models", "django_iq.worker"}
    assert imports_of(source, known) == {"django_iq.models"}

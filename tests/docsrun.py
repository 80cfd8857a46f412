"""Runs the code blocks of README.md and docs/ with Sybil: tests/test_docs.py makes one test of
each block, named ``page.md:line``. Sybil parses the pages (fenced blocks, the
``<!-- skip: next "why" -->`` markers, ``<!-- invisible-code-block: python`` blocks); this module
says how a block of this project runs: ``python`` blocks page by page on the test database, a
block headed ``# shop/jobs.py`` as that module, settings blocks through django_iq's system
checks, ``bash`` blocks against the example project on a scratch SQLite database, ``json``
blocks parsed. docs/writing-docs.md is the guide for doc authors."""

from __future__ import annotations

import ast
import copy
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import traceback
import types
from dataclasses import dataclass, field
from importlib import import_module
from pathlib import Path
from typing import Any, ClassVar
from unittest import SkipTest, mock

from django.conf import settings
from django.core.checks import CheckMessage
from django.db import connection
from django.test import override_settings
from django.utils.module_loading import import_string
from sybil import Document, Example
from sybil.evaluators.python import pad
from sybil.parsers.markdown import CodeBlockParser, SkipParser

from django_iq import registry, signals
from django_iq.checks import check_leader_settings, check_settings
from django_iq.conf import iq_settings

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])
EXAMPLE_PROJECT = ROOT / "example_project"
SHELL_TIMEOUT_SECONDS = 120

# ``# shop/jobs.py`` or ``# shop/jobs.py: what it is`` on a block's first line.
FILE_COMMENT = re.compile(r"\A#\s*([A-Za-z_][\w/]*)\.py\b")

# What ``django-admin startproject`` writes, as far as the settings blocks use it.
STARTPROJECT_SETTINGS: dict[str, Any] = {
    "BASE_DIR": Path("/srv/mysite"),
    "INSTALLED_APPS": [
        "django.contrib.admin",
        "django.contrib.auth",
        "django.contrib.contenttypes",
        "django.contrib.sessions",
        "django.contrib.messages",
        "django.contrib.staticfiles",
    ],
    "DATABASES": {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": Path("/srv/mysite/db.sqlite3"),
        }
    },
}


def shown(page: Path | str) -> str:
    """A page's path as messages show it: from the checkout's root when it is inside."""
    page = Path(page)
    return str(page.relative_to(ROOT)) if page.is_relative_to(ROOT) else str(page)


def where(example: Example) -> str:
    """``docs/page.md:12``: the page and line of a block, as failure messages name it."""
    return f"{shown(example.path)}:{example.line}"


class BlockFailed(AssertionError):
    """A block of the docs did not run as written; the message names its page and line."""


# -- python ------------------------------------------------------------------------------------


def _code(example: Example) -> types.CodeType:
    source = pad(example.parsed, example.line + example.parsed.line_offset)
    return compile(source, example.path, "exec", dont_inherit=True)


def _assigned_names(tree: ast.Module) -> set[str] | None:
    """The UPPER_CASE names a settings block sets, or None when it is not a settings block."""
    names: set[str] = set()
    for statement in tree.body:
        if isinstance(statement, ast.Import | ast.ImportFrom):
            continue
        if isinstance(statement, ast.Assign):
            targets = statement.targets
        elif isinstance(statement, ast.AugAssign | ast.AnnAssign):
            targets = [statement.target]
        else:
            return None
        for target in targets:
            while isinstance(target, ast.Subscript | ast.Attribute):
                target = target.value
            if not (isinstance(target, ast.Name) and target.id.isupper()):
                return None
            names.add(target.id)
    return names or None


def _module(name: str, page: PageRun) -> types.ModuleType:
    """A fresh module ``name`` in ``sys.modules``, its packages made when missing."""
    parts = name.split(".")
    for depth in range(1, len(parts)):
        package = ".".join(parts[:depth])
        if package not in sys.modules:
            try:
                import_module(package)
            except ImportError:
                page.add_module(package, types.ModuleType(package))
                sys.modules[package].__path__ = []
    module = types.ModuleType(name)
    page.add_module(name, module)
    return module


def evaluate_python(example: Example) -> None:
    page = PageRun.of(example.document)
    code = _code(example)
    first_line = example.parsed.lstrip().split("\n", 1)[0]
    comment = FILE_COMMENT.match(first_line)
    path = comment.group(1) if comment else None
    names = _assigned_names(ast.parse(str(example.parsed)))
    try:
        if path == "settings" or (path is None and names):
            exec(code, page.settings)  # noqa: S102 - the docs' own blocks
            check_settings_block(page.settings, names or set(), where(example))
        elif path is not None:
            module = _module(path.replace("/", "."), page)
            module.__file__ = example.path
            exec(code, module.__dict__)  # noqa: S102 - the docs' own blocks
        else:
            exec(code, example.document.namespace)  # noqa: S102 - the docs' own blocks
    except BlockFailed:
        raise
    except Exception as exc:
        raise BlockFailed(
            f"{where(example)}: the python block raised {type(exc).__name__}: {exc}\n"
            + "".join(traceback.format_exception(exc)[1:])
        ) from exc


def _messages(messages: list[CheckMessage]) -> list[str]:
    return [f"{m.id}: {m.msg} (hint: {m.hint})" for m in messages if m.is_serious(30)]


def check_settings_block(namespace: dict[str, Any], names: set[str], place: str) -> None:
    """Refuse settings that Django or django_iq would refuse at start-up."""
    problems: list[str] = []
    if "DJANGO_IQ" in names:
        # The checks see the test settings' databases plus the aliases the page adds, and the
        # page's DEBUG (True as startproject writes it, unless the page says otherwise).
        databases = {**namespace["DATABASES"], **settings.DATABASES}
        # The project's own job and task modules are imported under its real settings first:
        # importing them under the page's (a task naming a queue the page does not declare)
        # would be refused for reasons that are not the page's.
        registry.autodiscover()
        with (
            override_settings(DJANGO_IQ=namespace["DJANGO_IQ"], DEBUG=namespace.get("DEBUG", True)),
            mock.patch.object(settings, "DATABASES", databases),
        ):
            problems += _messages(check_settings() + check_leader_settings())
        iq_settings.reset()
    if "INSTALLED_APPS" in names and "django_iq" not in namespace["INSTALLED_APPS"]:
        problems.append('INSTALLED_APPS does not hold "django_iq"')
    for alias, options in namespace["TASKS"].items() if "TASKS" in names else ():
        try:
            import_string(options["BACKEND"])
        except ImportError as exc:
            problems.append(f"TASKS[{alias!r}]: {exc}")
    for alias, options in namespace["DATABASES"].items() if "DATABASES" in names else ():
        try:
            import_module(f"{options['ENGINE']}.base")
        except ImportError as exc:
            problems.append(f"DATABASES[{alias!r}]: {exc}")
    if problems:
        raise BlockFailed(f"{place}: the settings would be refused:\n  " + "\n  ".join(problems))


# -- shell, json -------------------------------------------------------------------------------


@dataclass
class ShellSandbox:
    """A scratch directory with the example project's ``manage.py`` and a migrated database."""

    directory: Path
    env: dict[str, str]

    @classmethod
    def create(cls) -> ShellSandbox:
        directory = Path(tempfile.mkdtemp(prefix="iq-docs-"))
        (directory / "manage.py").symlink_to(EXAMPLE_PROJECT / "manage.py")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "PYTEST_"))}
        env.update(
            PATH=os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")]),
            DATABASE_URL=f"sqlite:///{directory / 'db.sqlite3'}",
        )
        sandbox = cls(directory, env)
        sandbox.run("python manage.py migrate --verbosity 0", "the scratch database")
        return sandbox

    def run(self, script: str, place: str) -> None:
        done = subprocess.run(
            ["bash", "-e", "-o", "pipefail", "-c", script],
            cwd=self.directory,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=SHELL_TIMEOUT_SECONDS,
            check=False,
        )
        if done.returncode:
            raise BlockFailed(
                f"{place}: the shell block exited with status {done.returncode}\n"
                f"--- stdout\n{done.stdout[-3000:]}--- stderr\n{done.stderr[-3000:]}"
            )

    def remove(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)


_sandbox: list[ShellSandbox] = []


def evaluate_shell(example: Example) -> None:
    if not _sandbox:
        _sandbox.append(ShellSandbox.create())
    _sandbox[0].run(str(example.parsed), where(example))


def remove_shell_sandbox() -> None:
    while _sandbox:
        _sandbox.pop().remove()


def evaluate_json(example: Example) -> None:
    try:
        json.loads(str(example.parsed))
    except ValueError as exc:
        raise BlockFailed(f"{where(example)}: the json block does not parse: {exc}") from exc


EVALUATORS = (evaluate_python, evaluate_shell, evaluate_json)
PARSERS = [
    SkipParser(),
    CodeBlockParser("python", evaluate_python),
    CodeBlockParser("bash", evaluate_shell),
    CodeBlockParser("sh", evaluate_shell),
    CodeBlockParser("json", evaluate_json),
]


# -- pages ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Block:
    """One block that runs: its page, where it starts in the page's text, and its line."""

    page: Path
    start: int
    line: int

    def __str__(self) -> str:
        return f"{shown(self.page)}:{self.line}"


def code_blocks(pages: list[Path] = PAGES) -> list[Block]:
    """Every block that runs, page by page, in page order (skip markers are not tests: they
    act on the way)."""
    return [
        Block(page, example.start, example.line)
        for page in pages
        for example in Document.parse(str(page), *PARSERS)
        if example.region.evaluator in EVALUATORS
    ]


@dataclass
class PageRun:
    """One run of a page down to a block. What it changes outside the test's transaction (jobs
    registered, modules made, signal receivers connected) is undone by ``close()``."""

    document: Document
    settings: dict[str, Any] = field(default_factory=lambda: copy.deepcopy(STARTPROJECT_SETTINGS))
    failed: list[str] = field(default_factory=list)
    modules: dict[str, types.ModuleType | None] = field(default_factory=dict)
    jobs: dict[str, Any] = field(default_factory=registry.registered_jobs)
    receivers: dict[str, list[Any]] = field(default_factory=dict)

    current: ClassVar[PageRun | None] = None

    @classmethod
    def of(cls, document: Document) -> PageRun:
        assert cls.current is not None and cls.current.document is document, "no page is open"
        return cls.current

    def add_module(self, name: str, module: types.ModuleType) -> None:
        self.modules.setdefault(name, sys.modules.get(name))
        sys.modules[name] = module
        parent, _, child = name.rpartition(".")
        if parent:
            setattr(sys.modules[parent], child, module)

    def close(self) -> None:
        registry._jobs.clear()
        registry._jobs.update(self.jobs)
        for name, module in self.modules.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module
        for name, receivers in self.receivers.items():
            signal = getattr(signals, name)
            signal.receivers[:] = receivers
            signal.sender_receivers_cache.clear()
        iq_settings.reset()
        self.document.namespace.clear()

    def replay(self, example: Example) -> None:
        """Run an earlier block of the page (python only: shell and json blocks change nothing
        later blocks see), so that skip markers act as they would in page order."""
        runs = example.region.evaluator is evaluate_python or example.region.evaluator not in (
            EVALUATORS
        )
        try:
            if runs:
                example.evaluate()
            else:
                self.document.evaluate(example, lambda _: None)
        except SkipTest:
            pass
        except Exception:
            self.failed.append(where(example))


def run_block(block: Block) -> None:
    """Run ``block`` after the blocks above it on its page, in a fresh namespace."""
    document = Document.parse(str(block.page), *PARSERS)
    document.namespace["__name__"] = "example"
    page = PageRun(document)
    page.receivers = {
        name: list(signal.receivers)
        for name, signal in vars(signals).items()
        if isinstance(signal, signals.Signal)
    }
    PageRun.current = page
    try:
        for example in document:
            if example.start < block.start:
                page.replay(example)
            elif example.start == block.start:
                try:
                    example.evaluate()
                except BlockFailed as exc:
                    if page.failed:
                        raise BlockFailed(
                            f"{exc}\n(blocks above it failed too: {', '.join(page.failed)})"
                        ) from exc
                    raise
                return
        raise BlockFailed(f"{block}: no such block any more")
    finally:
        PageRun.current = None
        page.close()


def runs_on_this_database() -> str | None:
    """Why the blocks do not run here, or None: they run on SQLite only."""
    if connection.vendor != "sqlite":
        return (
            f"the docs' blocks run on SQLite only (DATABASE_URL is {connection.vendor}); "
            "SQLite runs them in CI"
        )
    return None

"""What the partition scenarios share: a relay that silences a process's connections, and the
verdict read from the runs the jobs appended to a file (a run cut off from the database cannot
write to it)."""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from django.db import connection

from django_iq.models import Entry, EntryError
from tests.faults.harness import INF, Verdict
from tests.netproxy import OutageProxy
from tests.processes import Command, database_url
from tests.testapp.jobs import recorded_in_file


@contextmanager
def relay() -> Iterator[OutageProxy]:
    settings = connection.settings_dict
    default_port = {"postgresql": 5432, "mysql": 3306}[connection.vendor]
    proxy = OutageProxy(settings["HOST"] or "127.0.0.1", int(settings["PORT"] or default_port))
    try:
        yield proxy
    finally:
        proxy.close()


def through(proxy: OutageProxy, env: dict[str, str]) -> dict[str, str]:
    """``env`` with its DATABASE_URL going through the relay."""
    settings = connection.settings_dict
    direct = f"@{settings['HOST'] or '127.0.0.1'}:{settings['PORT'] or ''}/"
    url = database_url()
    assert direct in url, url
    return {**env, "DATABASE_URL": url.replace(direct, f"@127.0.0.1:{proxy.port}/")}


@dataclass
class FileRun:
    token: str
    group: str
    pid: int
    start: float
    end: float  # INF: never ended (its process is still running it)
    outcome: str  # "end", the exception that stopped it, or "exit" (its process exited)


class ExitWatch:
    """When each watched process exited, as seen from here (polled every 20 ms)."""

    def __init__(self, *commands: Command) -> None:
        self.exited: dict[int, float] = {}
        self._commands = list(commands)
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while not self._done.wait(0.02):
            for command in self._commands:
                if command.pid not in self.exited and command.poll() is not None:
                    self.exited[command.pid] = time.time()

    def close(self) -> None:
        self._done.set()
        self._thread.join()


def enqueue_in_file(
    path: Path,
    tokens: list[str],
    group: str,
    seconds: float,
    step: float = 0.02,
    linger: float = 0.0,
) -> None:
    for token in tokens:
        options = {"group_key": group} if group else {}
        extra = {"linger": linger} if linger else {}
        recorded_in_file.using(**options).enqueue(
            token, str(path), group_key=group, seconds=seconds, step=step, **extra
        )


def file_runs(path: Path, exited: dict[int, float]) -> list[FileRun]:
    """Every run appended to ``path``; a run with no end line ended when its process exited."""
    open_runs: dict[tuple[str, int], FileRun] = {}
    runs: list[FileRun] = []
    for line in path.read_text().splitlines() if path.exists() else []:
        event, token, group, pid_text, at_text = line.split()
        pid, at = int(pid_text), float(at_text)
        if event == "start":
            run = FileRun(token, "" if group == "-" else group, pid, at, INF, "")
            open_runs[(token, pid)] = run
            runs.append(run)
        else:
            run = open_runs.pop((token, pid))
            run.end, run.outcome = at, event
    for run in open_runs.values():
        if run.pid in exited:
            run.end, run.outcome = exited[run.pid], "exit"
    return runs


def overlaps(runs: list[FileRun]) -> list[str]:
    """Pairs of runs of one entry, or of one group, that ran at the same time (no excuse: a
    network fault must not let an entry or a group run in two places)."""
    found = []
    for label, key in (("entry", lambda r: r.token), ("group", lambda r: r.group)):
        by: dict[str, list[FileRun]] = defaultdict(list)
        for run in runs:
            if key(run):
                by[key(run)].append(run)
        for name, members in by.items():
            members.sort(key=lambda r: r.start)
            for i, a in enumerate(members):
                for b in members[i + 1 :]:
                    if b.start < a.end:
                        found.append(
                            f"{label} {name}: pid {a.pid} ran {a.start:.3f}-{a.end:.3f} "
                            f"({a.outcome}), pid {b.pid} from {b.start:.3f}"
                        )
    return found


def partition_verdict(
    scenario: str, tokens: list[str], runs: list[FileRun], faults: int
) -> Verdict:
    done = defaultdict(int)
    for run in runs:
        if run.outcome == "end":
            done[run.token] += 1
    from tests.faults.harness import DATABASE_NAMES

    return Verdict(
        scenario=scenario,
        database=DATABASE_NAMES[connection.vendor],
        entries=len(tokens),
        faults=faults,
        reruns=sum(max(0, sum(r.token == t for r in runs) - 1) for t in tokens),
        overlaps=overlaps(runs),
        lost=[t for t in tokens if not done[t]],
        left=[f"{Entry.objects.count()} entries left"] if Entry.objects.exists() else [],
    )


def recovery_errors(token: str) -> list[str]:
    """The exception classes of ``token``'s error records."""
    return [
        e.exception_class
        for e in EntryError.objects.order_by("pk")
        if isinstance(e.args, list) and e.args and e.args[0] == token
    ]

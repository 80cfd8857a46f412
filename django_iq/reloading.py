"""``runworker --reload``: run one worker under Django's autoreloader, for development.

As with ``runserver``, a parent process starts the worker in a child and starts it again
whenever the child exits with ``RELOAD_EXIT``. The child watches the Python files it has
loaded (jobs modules included) with Django's reloader; when one changes it stops its worker
the graceful way, as SIGTERM would (running jobs finish, claims not started are released, the
``Worker`` row is marked stopped), and only then exits for the reload. A worker that failed to
start (a syntax error in a jobs module) keeps watching and starts again once a file changes.

The parent forwards SIGTERM and SIGINT to the child, which runs in its own session: a
terminal's Ctrl-C reaches the child once, through the parent, and is a graceful stop. A child
whose parent is gone (killed with SIGKILL) stops its worker the same way and exits.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

from django.utils import autoreload

from django_iq.logs import get_logger
from django_iq.process import STOP_SIGNALS, watch_parent
from django_iq.registry import autodiscover
from django_iq.worker import WorkerProcess

logger = get_logger("django_iq.worker")

# The child's exit status that asks the parent for a fresh child (Django's own convention).
RELOAD_EXIT = 3
# The child's status when its worker could not start and it stopped before any file changed.
EXIT_FAILED_START = 1
# How often the child looks whether its parent is still there.
PARENT_CHECK_SECONDS = 1.0
# How long the worker waits for the reloader's first look at the files before it starts.
FIRST_LOOK_SECONDS = 60.0


def run_with_reload(
    make_worker: Callable[[], WorkerProcess], before_start: Callable[[], object] = lambda: None
) -> int:
    """Run the worker ``make_worker()`` builds, starting it afresh on every code change;
    return the exit status of the last worker. ``before_start`` (the command's system checks,
    which import the URLconf and with it any jobs module it imports) runs in the child before
    each worker starts: when it raises, the child waits for a change, as ``runserver`` does."""
    if os.environ.get(autoreload.DJANGO_AUTORELOAD_ENV) == "true":
        return _Reload(make_worker(), before_start).run()
    return _parent()


def _parent() -> int:
    arguments = autoreload.get_child_arguments()
    environ = {**os.environ, autoreload.DJANGO_AUTORELOAD_ENV: "true"}
    while True:
        # The arguments are this process's own command line, as Django's runserver uses them.
        child = subprocess.Popen(  # noqa: S603
            arguments, env=environ, close_fds=False, start_new_session=True
        )

        def forward(signum: int, frame: FrameType | None, child: Any = child) -> None:
            child.send_signal(signum)

        previous = {signum: signal.signal(signum, forward) for signum in STOP_SIGNALS}
        try:
            code = child.wait()
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
        if code != RELOAD_EXIT:
            return code


class _Reload:
    """The child's side: the worker in a thread, the reloader in the main thread."""

    def __init__(
        self, worker: WorkerProcess, before_start: Callable[[], object] = lambda: None
    ) -> None:
        self.worker = worker
        self.before_start = before_start
        self.reloader = autoreload.get_reloader()
        self.changed: str | None = None
        self.codes: list[int] = []
        self.thread = threading.Thread(target=self._run_worker, name="iq-worker", daemon=True)
        self._lock = threading.Lock()
        # Set once the reloader has taken its first look at the files (the mtimes later ones
        # are compared with). The worker starts only then: a file changed while the reloader
        # was still starting would otherwise be taken for the first version and never reload.
        self.first_look = threading.Event()
        self._watch_first_look()

    def _watch_first_look(self) -> None:
        snapshot = getattr(self.reloader, "snapshot_files", None)
        if snapshot is None:  # a reloader of another kind (watchman): nothing to wait for
            self.first_look.set()
            return

        def snapshot_then_tell() -> Iterator[tuple[Any, float]]:
            yield from snapshot()
            self.first_look.set()

        self.reloader.snapshot_files = snapshot_then_tell  # type: ignore[attr-defined]

    def _run_worker(self) -> None:
        try:
            # A module that fails to import is watched too (Django's ``check_errors``).
            autoreload.check_errors(self._start)()
        except BaseException:
            logger.exception(
                "the worker failed to start; it starts again when a watched file changes"
            )
        finally:
            with self._lock:
                # A clean stop ends the reloader; a failed start waits for a change.
                if self.codes or self.changed is not None or self.worker.stopping.is_set():
                    self.reloader.stop()

    def _start(self) -> None:
        if not self.first_look.wait(FIRST_LOOK_SECONDS):
            logger.warning(
                "the reloader took no look at the files within %ss; starting the worker anyway",
                FIRST_LOOK_SECONDS,
            )
        self.before_start()
        self.codes.append(self.worker.run(install_signal_handlers=False))

    def _parent_gone(self) -> None:
        logger.warning("the reloading parent is gone: stopping the worker")
        with self._lock:
            self.worker.stop()
            if not self.thread.is_alive():
                self.reloader.stop()

    def _watching(self) -> bool:
        return self.thread.is_alive() or not self.reloader.should_stop

    def on_file_changed(self, sender: Any, file_path: Any, **kwargs: Any) -> bool:
        with self._lock:
            if self.changed is None:
                logger.info("%s changed: stopping the worker to start it again", file_path)
            self.changed = str(file_path)
            self.worker.stop()
            if not self.thread.is_alive():
                self.reloader.stop()
        return True  # the reload waits for the worker to have stopped

    def run(self) -> int:
        autoreload.file_changed.connect(self.on_file_changed, weak=False)
        try:
            # Signals reach the main thread only: SIGTERM / SIGINT stop the worker there.
            self.worker.install_signal_handlers()
            # The jobs modules are loaded before the reloader's first look at the files, so a
            # change made just after the start is not taken for the first version.
            with contextlib.suppress(Exception):
                autoreload.check_errors(autodiscover)()
            self.thread.start()
            watch_parent(self._parent_gone, self._watching, PARENT_CHECK_SECONDS)
            self.reloader.run(self.thread)
            self.thread.join()
        finally:
            autoreload.file_changed.disconnect(self.on_file_changed)
        if self.changed is not None:
            return RELOAD_EXIT
        return self.codes[0] if self.codes else EXIT_FAILED_START

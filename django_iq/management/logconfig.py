"""Console logging for django_iq's long-running commands, unless the project configures its own."""

from __future__ import annotations

import logging


def configure_logging(level: int) -> None:
    """Send django_iq's log lines to stderr at ``level`` if no handler is configured yet."""
    logger = logging.getLogger("django_iq")
    if not logger.handlers and not logging.getLogger().handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(
            logging.Formatter("%(asctime)s %(levelname)s %(processName)s %(message)s")
        )
        logger.addHandler(handler)
    logger.setLevel(level)

#!/usr/bin/env python
"""Django's command-line entry point for the example project; works from any directory."""

import os
import sys
from pathlib import Path


def main() -> None:
    """Put this directory on ``sys.path`` and run the management command from ``sys.argv``."""
    project_dir = str(Path(__file__).resolve().parent)
    if project_dir not in sys.path:
        sys.path.insert(0, project_dir)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "example_project.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()

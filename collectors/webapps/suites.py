"""App suites in the task registry: ``AppSuite`` (the tasks of one task file) and
``register_app_suite``.  The built-in ones are named in ``collectors.tasks.BUILTIN_APP_SUITES``."""

from __future__ import annotations

from pathlib import Path

from collectors.tasks import TaskSpec, register_suite
from collectors.webapps.app import WebApp, register_app
from collectors.webapps.taskdef import AppTask, load_tasks


class AppSuite:
    """The tasks of one task file as a suite of the registry (``collectors.tasks.Suite``)."""

    def __init__(self, name: str, tasks: list[AppTask]):
        self.name = name
        self._tasks = tasks

    def tasks(self) -> list[TaskSpec]:
        return [TaskSpec(t.name, t.start, self.name, note=t.note, app_task=t) for t in self._tasks]


def register_app_suite(
    app: WebApp, task_file: str | Path, experts: dict | None = None
) -> list[TaskSpec]:
    """Register ``app`` and the tasks of ``task_file`` (their experts from ``experts``)."""
    register_app(app)
    tasks = load_tasks(task_file, experts)
    return register_suite(AppSuite(tasks[0].name.split("/")[0], tasks))

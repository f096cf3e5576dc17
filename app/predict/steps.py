"""Named steps of a long run with rich progress bars on stderr (or silent), and their wall times."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn


class Steps:
    """Named steps with rich progress bars on stderr (or silent), and their wall times."""

    def __init__(self, *, show: bool) -> None:
        self.show = show
        self.timings: dict[str, float] = {}
        self._progress = (
            Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                TextColumn("{task.completed}/{task.total}"),
                TimeElapsedColumn(),
                console=Console(stderr=True),
            )
            if show
            else None
        )

    def __enter__(self) -> Steps:
        if self._progress is not None:
            self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.stop()

    @contextmanager
    def step(self, name: str, total: int = 1) -> Iterator[Any]:
        started = time.perf_counter()
        task = self._progress.add_task(name, total=total) if self._progress is not None else None

        def advance(amount: int = 1) -> None:
            if self._progress is not None and task is not None:
                self._progress.advance(task, amount)

        try:
            yield advance
        finally:
            if self._progress is not None and task is not None:
                self._progress.update(task, completed=total)
            self.timings[name] = round(time.perf_counter() - started, 3)

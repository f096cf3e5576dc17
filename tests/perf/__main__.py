"""`python -m tests.perf [NAME ...] [-- OPTION ...]` (what `make bench` runs): every `bench_*.py` here, in
name order.

Each benchmark module defines `main()`, callable with no arguments; it runs the benchmark and returns its
report (anything rich can print, or None when it printed its own). Pass names (`intake`, `bench_intake`)
to run only those. Options after `--` go to each chosen benchmark's `main(argv)` (only benchmarks whose
`main` takes them: `python -m tests.perf scoring training -- --quick`). The exit status is 1 when a
benchmark raised, 0 otherwise: targets are reported, not enforced, since a benchmark's figures depend on
the machine it runs on.
"""

from __future__ import annotations

import importlib
import inspect
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console

HERE = Path(__file__).resolve().parent


def discover(names: Sequence[str] = ()) -> list[str]:
    """Module names of the benchmarks, `bench_*.py` in this folder, filtered by `names` when given."""
    found = sorted(path.stem for path in HERE.glob("bench_*.py"))
    if not names:
        return found
    wanted = {name if name.startswith("bench_") else f"bench_{name}" for name in names}
    unknown = wanted - set(found)
    if unknown:
        raise SystemExit(f"unknown benchmark(s): {', '.join(sorted(unknown))}; have: {', '.join(found)}")
    return [name for name in found if name in wanted]


def split_options(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """(benchmark names, options for them): options are what follows `--`."""
    args = list(argv)
    if "--" not in args:
        return args, []
    at = args.index("--")
    return args[:at], args[at + 1 :]


def main(argv: Sequence[str] | None = None) -> int:
    console = Console() if sys.stdout.isatty() else Console(width=140)
    wanted, options = split_options(sys.argv[1:] if argv is None else argv)
    names = discover(wanted)
    failed: list[str] = []
    for name in names:
        console.rule(f"[bold]{name}")
        started = time.perf_counter()
        try:
            module = importlib.import_module(f"{__package__ or 'tests.perf'}.{name}")
            run = getattr(module, "main", None)
            if not callable(run):
                raise TypeError(f"{name} defines no main()")
            if options and not inspect.signature(run).parameters:
                raise TypeError(
                    f"{name}'s main() takes no options; run it alone without `-- {' '.join(options)}`"
                )
            report = run(options) if options else run()
        except KeyboardInterrupt:
            raise
        except BaseException:  # one broken benchmark must not hide the others' figures
            console.print_exception()
            failed.append(name)
            continue
        if report is not None:
            console.print(report)
        console.print(f"[dim]{name} took {time.perf_counter() - started:.1f}s")
    if failed:
        console.print(f"[red]failed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

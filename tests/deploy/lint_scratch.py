"""Runs lint-imports over a scratch copy of the package once as it is and once per planted import.

`python lint_scratch.py SCRATCH CASES_JSON RESULTS_JSON`, with SCRATCH holding a copy of `app/` and
`.importlinter`. CASES_JSON lists `{"id", "path", "line"}`: for each case the line is appended to the
file at `path` (relative to SCRATCH), lint-imports runs (its own entry point, `importlinter.cli`, so
the exit status and report are the command's), and the file is put back before the next case, so each
case is judged on its own against an otherwise clean copy. The first run, `baseline`, plants nothing.
RESULTS_JSON gets `{id: {"status": int, "output": str}}`.

One process for all the runs: a start of Python and import-linter costs more than building the graph
(~0.4 s for `app`), and the graph is rebuilt from the files for every run (no cache).
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import os
import sys
from pathlib import Path


def _lint() -> tuple[int, str]:
    from importlinter import cli  # noqa: PLC0415 (imported once sys.path names the scratch copy)

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = cli.lint_imports(config_filename=".importlinter", no_cache=True, no_logo=True)
    return status, out.getvalue()


def main(scratch: Path, cases_file: Path, results_file: Path) -> int:
    os.chdir(scratch)
    sys.path.insert(0, str(scratch))
    spec = importlib.util.find_spec("app")
    origin = Path(spec.origin).resolve() if spec and spec.origin else None
    if origin is None or scratch.resolve() not in origin.parents:
        # An installed `app` (an editable install of the repository) would be linted instead.
        print(f"`app` resolves to {origin}, not to the scratch copy {scratch}", file=sys.stderr)
        return 2
    cases = json.loads(cases_file.read_text(encoding="utf-8"))
    results: dict[str, dict[str, object]] = {}
    status, output = _lint()
    results["baseline"] = {"status": status, "output": output}
    for case in cases:
        target = scratch / case["path"]
        original = target.read_bytes()
        try:
            target.write_bytes(original + b"\n" + case["line"].encode() + b"\n")
            status, output = _lint()
        finally:
            target.write_bytes(original)
        results[case["id"]] = {"status": status, "output": output}
    results_file.write_text(json.dumps(results), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])))

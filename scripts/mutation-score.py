#!/usr/bin/env python3
"""Prints the mutation score of each package and module mutmut mutated, and the overall score (`make mutate`).

mutmut 3 keeps each mutated file's results beside its copy in mutants/ (`<file>.meta`, JSON: one exit code
per mutant). The score is killed / tested: a mutant the tests catch (a failing test, a timeout, a crash)
is killed; one no test covers counts against the score like a survivor, since a real bug there would go
unseen too. Skipped mutants and those not run yet are left out of both.

    python scripts/mutation-score.py                  # exit 1 when the overall score is below 90%
    python scripts/mutation-score.py --min 85         # another threshold
    python scripts/mutation-score.py --survivors      # also list every surviving mutant's name
    python scripts/mutation-score.py --unkilled app/classify   # just the names not killed yet (survived,
        untested or not run), for `mutmut run NAME...`: after new tests, only these need running again

Standard library only: it runs in the venv that ran mutmut, but needs nothing from it.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MUTANTS = ROOT / "mutants"

# mutmut's exit codes (mutmut/stats.py, status_by_exit_code): the test run's own exit code for a mutant,
# or one of mutmut's markers. Anything not listed is "suspicious" there; it is not counted as a kill here.
KILLED = {1, 3, 24, -24, 152, 255, 36, 37, -9, -11}  # tests failed, timeouts, type check, crashes
SURVIVED = {0}
NO_TESTS = {5, 33}
NOT_COUNTED = {None, 2, 34}  # not run yet, interrupted, skipped


def package_of(source: str) -> str:
    """`app/decide/gates.py` -> `app/decide`."""
    return str(Path(source).parent)


def load() -> dict[str, dict[str, int | None]]:
    """Exit code by mutant name, for each mutated source file (path relative to the repository)."""
    by_file: dict[str, dict[str, int | None]] = {}
    for meta in sorted(MUTANTS.glob("app/**/*.py.meta")):
        source = str(meta.relative_to(MUTANTS).with_suffix(""))
        codes = json.loads(meta.read_text())["exit_code_by_key"]
        if codes:
            by_file[source] = codes
    return by_file


def tally(codes: dict[str, int | None]) -> Counter[str]:
    c: Counter[str] = Counter()
    for code in codes.values():
        if code in NOT_COUNTED:
            c["not counted"] += 1
        elif code in KILLED:
            c["killed"] += 1
        elif code in SURVIVED:
            c["survived"] += 1
        elif code in NO_TESTS:
            c["no tests"] += 1
        else:
            c["suspicious"] += 1
    return c


def score(c: Counter[str]) -> float:
    tested = c["killed"] + c["survived"] + c["no tests"] + c["suspicious"]
    return 100.0 * c["killed"] / tested if tested else 100.0


def line(name: str, c: Counter[str]) -> str:
    return (
        f"{name:<34} {score(c):6.1f}%  killed {c['killed']:5}  survived {c['survived']:4}"
        f"  no tests {c['no tests']:4}  suspicious {c['suspicious']:3}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--min", type=float, default=90.0, help="the overall score below which to fail")
    parser.add_argument("--survivors", action="store_true", help="list the surviving mutants too")
    parser.add_argument("--unkilled", nargs="*", metavar="PREFIX", help="print only unkilled mutant names")
    args = parser.parse_args()

    by_file = load()
    if args.unkilled is not None:
        for source, codes in by_file.items():
            if args.unkilled and not any(source.startswith(p) for p in args.unkilled):
                continue
            for name, code in codes.items():
                if code not in KILLED and code not in {2, 34}:
                    print(name)
        return 0
    if not by_file:
        print("no mutmut results under mutants/: run `make mutate` (mutmut run) first", file=sys.stderr)
        return 2

    packages: dict[str, Counter[str]] = {}
    overall: Counter[str] = Counter()
    for source, codes in by_file.items():
        c = tally(codes)
        packages.setdefault(package_of(source), Counter()).update(c)
        overall.update(c)

    print("per module:")
    for source, codes in by_file.items():
        print("  " + line(source, tally(codes)))
    print("per package:")
    for package, c in sorted(packages.items()):
        print("  " + line(package, c))
    print("  " + line("overall", overall))

    if args.survivors:
        print("surviving or untested mutants (`mutmut show NAME` prints the change):")
        for codes in by_file.values():
            for name, code in sorted(codes.items()):
                if code in SURVIVED or code in NO_TESTS:
                    print(f"  {name}" + ("  (no tests)" if code in NO_TESTS else ""))

    if score(overall) < args.min:
        print(f"mutation score {score(overall):.1f}% is below {args.min:g}%", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""docs/architecture.md keeps matching what is built: every module under app/ is in its map (by dotted
name or path), and every module it names exists, so a module added, renamed or removed without the map
fails here rather than leaving the page quietly wrong."""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

from tests.deploy import support

DOC = support.ROOT / "docs" / "architecture.md"
APP = support.ROOT / "app"
# `app.act.nodes`, `app.predict.hysteresis.settle`; not `request.app.x` (the lookbehind).
DOTTED = re.compile(r"(?<![\w.])app(?:\.[A-Za-z_]\w*)+")
# `app/backoff.py`, `app/decide/`
PATH = re.compile(r"(?<![\w./])app/(?:\w+/)*\w+(?:\.py|/)?")
# Package markers and entry points say nothing of their own; generated protobuf code is not written.
NOT_LISTED = ("__init__.py", "__main__.py")


def _dotted(path: Path) -> str:
    parts = path.relative_to(support.ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    """Every module and package of `app`, by dotted name."""
    return {_dotted(path): path for path in sorted(APP.rglob("*.py"))}


def _must_be_listed() -> list[str]:
    return sorted(
        _dotted(path)
        for path in APP.rglob("*.py")
        if path.name not in NOT_LISTED and not path.name.endswith("_pb2.py")
    )


def _named() -> set[str]:
    """The dotted names the doc mentions, its paths turned into dotted names."""
    text = DOC.read_text(encoding="utf-8")
    paths = {m.removesuffix("/").removesuffix(".py").replace("/", ".") for m in PATH.findall(text)}
    return set(DOTTED.findall(text)) | paths


@cache
def _top_level_names(path: Path) -> frozenset[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
    return frozenset(names)


def _resolves(name: str, modules: dict[str, Path]) -> bool:
    """A module or package, or one top-level name of a module (`app.predict.hysteresis.settle`)."""
    if name in modules:
        return True
    parent, _, attribute = name.rpartition(".")
    return parent in modules and attribute in _top_level_names(modules[parent])


def test_every_module_is_in_the_map() -> None:
    named = _named()
    missing = [name for name in _must_be_listed() if name not in named]
    assert not missing, (
        f"modules under app/ that docs/architecture.md does not mention: {missing}; give each a line "
        "in its package's section of the module map"
    )


def test_the_map_names_only_modules_that_exist() -> None:
    modules = _modules()
    unknown = sorted(name for name in _named() if not _resolves(name, modules))
    assert not unknown, (
        f"docs/architecture.md names modules that do not exist: {unknown}; a module was renamed or "
        "removed, so its line (and any mention of it) must follow"
    )


def test_the_check_sees_what_it_is_meant_to() -> None:
    """The patterns read the doc's own spellings, and skip what only looks like a module."""
    found = set(DOTTED.findall("`app.act.nodes`, request.app.router, app.kube.conflicts."))
    assert found == {"app.act.nodes", "app.kube.conflicts"}
    assert PATH.findall("see app/backoff.py and app/decide/ (not ./app/x.py)") == [
        "app/backoff.py",
        "app/decide/",
    ]
    assert len(_must_be_listed()) > 200

"""A small reader of the Containerfile: the instructions it uses, in the Dockerfile reference's syntax.

Syntax from https://docs.docker.com/reference/dockerfile/ (the same for podman and buildah): a `\\` at
the end of a line continues the instruction; `#` starts a comment only at the start of a line; ENV and
LABEL take `key=value` pairs (quoted as in a shell); ENTRYPOINT and CMD in exec form are a JSON array;
RUN, COPY and FROM take `--flag=value` options before their arguments. An instruction this reader does
not know fails the parse, so the test never passes over something it did not check.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

KNOWN = frozenset(
    {"FROM", "ARG", "ENV", "LABEL", "RUN", "COPY", "USER", "WORKDIR", "EXPOSE", "ENTRYPOINT", "CMD"}
)


@dataclass(frozen=True)
class Instruction:
    keyword: str
    flags: dict[str, str]
    text: str  # the arguments, continuation lines joined


@dataclass(frozen=True)
class Stage:
    base: str
    name: str | None
    instructions: tuple[Instruction, ...]

    def all(self, keyword: str) -> list[Instruction]:
        return [i for i in self.instructions if i.keyword == keyword]

    def last(self, keyword: str) -> Instruction:
        found = self.all(keyword)
        assert found, f"stage {self.name or self.base} has no {keyword}"
        return found[-1]


@dataclass(frozen=True)
class Containerfile:
    stages: tuple[Stage, ...]
    args: dict[str, str] = field(default_factory=dict)

    @property
    def runtime(self) -> Stage:
        """The last stage: the image that is run."""
        return self.stages[-1]


def logical_lines(text: str) -> list[str]:
    lines: list[str] = []
    current = ""
    for raw in text.splitlines():
        stripped = raw.strip()
        if stripped.startswith("#") or (not stripped and not current):
            continue
        if stripped.endswith("\\"):
            current += stripped[:-1] + " "
            continue
        current += stripped
        if current.strip():
            lines.append(current.strip())
        current = ""
    assert not current, "the Containerfile ends inside a continued line"
    return lines


def _flags(text: str) -> tuple[dict[str, str], str]:
    flags: dict[str, str] = {}
    while (match := re.match(r"--([a-z-]+)=(\S+)\s+", text)) is not None:
        flags[match.group(1)] = match.group(2)
        text = text[match.end() :]
    return flags, text


def parse(path: Path) -> Containerfile:
    stages: list[Stage] = []
    args: dict[str, str] = {}
    current: list[Instruction] = []
    base: str | None = None
    name: str | None = None
    for line in logical_lines(path.read_text(encoding="utf-8")):
        keyword, _, rest = line.partition(" ")
        keyword = keyword.upper()
        assert keyword in KNOWN, f"{path.name}: instruction {keyword} is unknown to this reader"
        flags, rest = _flags(rest.strip() + " ")
        instruction = Instruction(keyword, flags, rest.strip())
        if keyword == "FROM":
            if base is not None:
                stages.append(Stage(base, name, tuple(current)))
            words = rest.split()
            base, name = words[0], (words[2] if len(words) == 3 and words[1].upper() == "AS" else None)
            current = []
            continue
        if keyword == "ARG":
            key, _, value = rest.strip().partition("=")
            args[key] = value
        current.append(instruction)
    assert base is not None, f"{path.name} has no FROM"
    stages.append(Stage(base, name, tuple(current)))
    return Containerfile(tuple(stages), args)


def pairs(instruction: Instruction, args: dict[str, str]) -> dict[str, str]:
    """ENV or LABEL `key=value ...`, shell-quoted, `${ARG}` expanded."""
    out: dict[str, str] = {}
    for word in shlex.split(instruction.text):
        key, sep, value = word.partition("=")
        assert sep, f"{instruction.keyword} {word!r}: only the key=value form is read"
        out[key] = re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], value)
    return out


def merged(stage: Stage, keyword: str, args: dict[str, str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for instruction in stage.all(keyword):
        out.update(pairs(instruction, args))
    return out


def exec_form(instruction: Instruction) -> list[str]:
    value = json.loads(instruction.text)
    assert isinstance(value, list), f"{instruction.keyword} is not in exec form: {instruction.text}"
    return [str(v) for v in value]


def copies(stage: Stage) -> dict[str, list[str]]:
    """COPY destinations (from the build context, not from another stage) and their sources."""
    out: dict[str, list[str]] = {}
    for instruction in stage.all("COPY"):
        if "from" in instruction.flags:
            continue
        *sources, destination = instruction.text.split()
        out[destination] = sources
    return out

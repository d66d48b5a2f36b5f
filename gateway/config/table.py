"""Declaring a setting once: a dataclass field with its flag, its ``GATEWAY_*`` variable and its
help, from which the command line, the environment and the option list in docs/ are made.

``opt(default, help, ...)`` is a ``dataclasses.field`` whose metadata is an ``Opt``. Rules, the
same for every setting:

- the flag is ``--`` + the field's name with dashes (``flag=`` to differ); a boolean is a
  ``--x/--no-x`` pair;
- the variable is ``GATEWAY_`` + the field's name in capitals (``env=`` to differ) and holds the
  setting's *value* (``GATEWAY_UDP_MUX=0``), parsed as the flag's argument would be; a flag wins
  over its variable;
- a repeatable flag (``repeat=True``) collects its values; its variable holds them joined by
  ``sep``.

A renamed or removed flag or variable stays in ``RENAMED`` and fails with a hint to its
successor, never silently.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TRUE = ("1", "true", "on", "yes")
FALSE = ("0", "false", "off", "no", "")


@dataclass(frozen=True, slots=True)
class Opt:
    help: str
    flag: str | None = None
    env: str | None = None
    parse: Callable[[str], Any] | None = None  # the flag's argument -> the value
    choices: Sequence[Any] | None = None
    metavar: str | None = None
    repeat: bool = False  # a repeatable flag; the variable joins the values with ``sep``
    sep: str = ","
    group: str = "general"
    shown: str | None = None  # the default as the help and docs/options.md say it


def opt(default: Any, help: str, **kwargs: Any) -> Any:
    """A setting: a dataclass field carrying its ``Opt``."""
    return dataclasses.field(default=default, metadata={"opt": Opt(help, **kwargs)})


def flag_of(field: dataclasses.Field[Any]) -> str:
    spec: Opt = field.metadata["opt"]
    return spec.flag or "--" + field.name.replace("_", "-")


def env_of(field: dataclasses.Field[Any]) -> str:
    spec: Opt = field.metadata["opt"]
    return "GATEWAY_" + (spec.env or field.name.upper())


def parse_bool(text: str) -> bool:
    value = text.strip().lower()
    if value in TRUE:
        return True
    if value in FALSE:
        return False
    raise argparse.ArgumentTypeError(f"{text!r} is not one of {TRUE} or {FALSE}")


def _parser_of(field: dataclasses.Field[Any]) -> Callable[[str], Any]:
    spec: Opt = field.metadata["opt"]
    if spec.parse is not None:
        return spec.parse
    default = field.default
    if isinstance(default, bool):
        return parse_bool
    if isinstance(default, (int, float, Path)):
        return type(default)
    return str


def settings(cls: type) -> list[dataclasses.Field[Any]]:
    """The fields of ``cls`` that are settings (declared with ``opt``)."""
    return [f for f in dataclasses.fields(cls) if "opt" in f.metadata]


def add_arguments(parser: argparse.ArgumentParser, cls: type) -> None:
    """One argument per setting of ``cls``; defaults stay unset (``None``), so that a value's
    origin (flag, variable, default) is decided in ``values``."""
    groups: dict[str, argparse._ArgumentGroup] = {}
    for field in settings(cls):
        spec: Opt = field.metadata["opt"]
        group = groups.get(spec.group)
        if group is None:
            group = groups[spec.group] = parser.add_argument_group(spec.group)
        default = spec.shown or _show(field.default)
        shown = "" if field.default is None else f" (default: {default})"
        text = f"{spec.help}{shown} [{env_of(field)}]".replace("%", "%%")
        kwargs: dict[str, Any] = {"dest": field.name, "default": None, "help": text}
        if isinstance(field.default, bool):
            group.add_argument(flag_of(field), action=argparse.BooleanOptionalAction, **kwargs)
            continue
        kwargs["type"] = _parser_of(field)
        if spec.choices is not None:
            kwargs["choices"] = spec.choices
        if spec.metavar is not None:
            kwargs["metavar"] = spec.metavar
        if spec.repeat:
            kwargs["action"] = "append"
        group.add_argument(flag_of(field), **kwargs)


def values(
    cls: type, args: argparse.Namespace, environ: Mapping[str, str],
    error: Callable[[str], Any],
) -> dict[str, Any]:
    """Each setting's value: the flag's, else its variable's, else the field's default."""
    out: dict[str, Any] = {}
    for field in settings(cls):
        spec: Opt = field.metadata["opt"]
        given = getattr(args, field.name)
        if given is not None:
            out[field.name] = tuple(given) if spec.repeat else given
            continue
        raw = environ.get(env_of(field))
        if raw is None:
            continue
        parse = _parser_of(field)
        try:
            if spec.repeat:
                value: Any = tuple(parse(v.strip()) for v in raw.split(spec.sep) if v.strip())
            else:
                value = parse(raw)
        except (ValueError, argparse.ArgumentTypeError) as exc:
            error(f"{env_of(field)}={raw!r}: {exc}")
            raise
        if spec.choices is not None and not spec.repeat and value not in spec.choices:
            error(f"{env_of(field)}={raw!r}: not one of {list(spec.choices)}")
        out[field.name] = value
    return out


def check_renamed(
    argv: Sequence[str], environ: Mapping[str, str], renamed: Mapping[str, str],
    error: Callable[[str], Any],
) -> None:
    """Fail on a flag or variable that was renamed or removed, naming its successor."""
    for arg in argv:
        name = arg.split("=", 1)[0]
        if name in renamed:
            error(f"{name} is gone: {renamed[name]}")
    for name, hint in renamed.items():
        if name.startswith("GATEWAY_") and name in environ:
            error(f"{name} is gone: {hint}")


def _show(value: Any) -> str:
    if isinstance(value, tuple):
        return ",".join(map(str, value)) or "none"
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)


def markdown(cls: type) -> str:
    """The option list (docs/options.md): one table per group."""
    lines = ["# Options", "",
             "Made from `gateway/config/__init__.py` by `python -m gateway.config --markdown`;",
             "a test checks it is current. Each flag's variable holds the setting's value; a",
             "flag wins.",
             ""]
    groups: dict[str, list[dataclasses.Field[Any]]] = {}
    for field in settings(cls):
        groups.setdefault(field.metadata["opt"].group, []).append(field)
    for group, fields in groups.items():
        lines += [f"## {group}", "", "| flag | variable | default | what |", "|---|---|---|---|"]
        for field in fields:
            spec: Opt = field.metadata["opt"]
            flag = flag_of(field)
            if isinstance(field.default, bool):
                flag = f"{flag}, --no-{flag[2:]}"
            default = spec.shown or ("none" if field.default is None else _show(field.default))
            text = spec.help.replace("|", "\\|")
            lines.append(f"| `{flag}` | `{env_of(field)}` | `{default}` | {text} |")
        lines.append("")
    return "\n".join(lines)


def environ() -> Mapping[str, str]:
    return os.environ

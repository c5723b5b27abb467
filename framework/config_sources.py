"""Checks each source of a config (a gin file, the command-line bindings, --seed) on its own.

Gin reads every source into one config, last one wins, so a parameter bound twice within one
file, or twice in `--gin_bindings`, silently keeps the later value, and an unclosed bracket
surfaces as a `tokenize.TokenError` naming no source. Here each source (each gin file, then
`--gin_bindings` as one) is read alone first:
an unclosed bracket names its file or binding; two different values for one parameter within
one source are an error; a later source overriding an earlier one stays legal and is logged.
"""

import tokenize
from collections.abc import Sequence

from absl import logging
from gin import config_parser

Key = tuple[str, str, str]  # (scope, configurable, parameter)


class _TextDelegate(config_parser.ParserDelegate):
    """Reads references and macros as their text: only sources are compared, nothing built."""

    def configurable_reference(self, scoped_name: str, evaluate: bool) -> str:
        return f"@{scoped_name}{'()' if evaluate else ''}"

    def macro(self, name: str) -> str:
        return f"%{name}"


def check(files: Sequence[str], bindings: Sequence[str]) -> None:
    """Raises ValueError for an unreadable source or a parameter bound twice within one; logs
    which later source overrides which earlier one."""
    sources = [(f"gin file {path!r}", _read(path)) for path in files]
    sources.append(("--gin_bindings", None))
    bound: dict[Key, tuple[str, str]] = {}  # key -> (value, source)
    for name, text in sources:
        values = _bindings(bindings) if text is None else statements(text, name)
        for key, value in values.items():
            earlier = bound.get(key)
            if earlier and earlier[0] != value:
                logging.info(
                    "%s = %s (%s) overrides %s from %s.",
                    binding_name(key),
                    value,
                    name,
                    earlier[0],
                    earlier[1],
                )
            bound[key] = (value, name)


def _read(path: str) -> str:
    with open(path, "rb") as f:
        data = f.read()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ValueError(
            f"The gin file {path!r} is not UTF-8 text ({error.reason} at byte {error.start}): "
            "a binary file, or one saved in another encoding. Give a gin config file (text)."
        ) from None


def _bindings(bindings: Sequence[str]) -> dict[Key, str]:
    """Each binding read alone, so that an incomplete one is named; duplicates compared."""
    values: dict[Key, str] = {}
    where: dict[Key, str] = {}
    for binding in bindings:
        for key, value in statements(binding, f"the binding {binding!r}").items():
            if key in values and values[key] != value:
                raise ValueError(
                    f"{binding_name(key)} is bound twice in --gin_bindings, to {values[key]} "
                    f"({where[key]!r}) and to {value} ({binding!r}); keep one of them."
                )
            values[key], where[key] = value, binding
    return values


def statements(text: str, source: str) -> dict[Key, str]:
    """The bindings of one source as (scope, configurable, parameter) -> value text; needs no
    configurable registered (references and macros are read as their text)."""
    values: dict[Key, str] = {}
    lines: dict[Key, int] = {}
    try:
        for statement in config_parser.ConfigParser(text, _TextDelegate()):
            if not isinstance(statement, config_parser.BindingStatement):
                continue
            key = (statement.scope, statement.selector, statement.arg_name)
            value = repr(statement.value)
            line = statement.location.line_num
            if key in values and values[key] != value:
                raise ValueError(
                    f"{binding_name(key)} is bound twice in {source}, to {values[key]} (line "
                    f"{lines[key]}) and to {value} (line {line}); keep one of them (a later "
                    "file or --gin_bindings may override a file's value)."
                )
            values[key], lines[key] = value, line
    except SyntaxError as error:
        raise ValueError(f"Bad gin syntax in {source}: {' '.join(str(error).split())}") from error
    except tokenize.TokenError as error:
        raise ValueError(
            f"{source[0].upper()}{source[1:]} is incomplete: a '(', '[' or '{{' opened "
            f"{_where(error)}is never closed."
        ) from error
    return values


def _where(error: tokenize.TokenError) -> str:
    """'near line N ' when tokenize says where it gave up."""
    position = error.args[1] if len(error.args) > 1 else None
    return f"before line {position[0]} " if position else ""


def binding_name(key: Key) -> str:
    scope, selector, parameter = key
    return f"{scope + '/' if scope else ''}{selector}{'.' + parameter if parameter else ''}"

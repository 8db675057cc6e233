"""The options reference, docs/options.md, generated from the config dataclasses (issue 49).

What a recipe may say is whatever the loader (`config.config_from_dict`) accepts, so the page is built the way the
loader builds a config: the task names of `config.RUN_CONFIGS`, each task's run config class
(`config.task_config_class`), its sections (the TOML tables) from the class's type hints, and the defaults from an
instance of the run config (a task may give a shared section other defaults, as classification does for [model]).
No module path of a task is written here, so a task module may move without touching this file.

A field's help is its comment in the class source, read with `tokenize` (comments are not in the AST):
- a trailing comment on the field's line, continued by comment-only lines directly below it;
- for a field with no trailing comment: the comment-only lines directly above it.
Comment lines between a field with a trailing comment and one without belong to the one below. A subclass that
re-declares a field without a comment (parsing's [decode] changes `beam`'s default) inherits its base class's help.

`python scripts/options_reference.py` writes the page; `--check` exits 1 when the page differs from what it would
write (tests/test_options_doc.py runs the same comparison).
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import difflib
import functools
import inspect
import io
import json
import sys
import textwrap
import tokenize
import typing
from collections.abc import Sequence
from pathlib import Path

from .config import RUN_CONFIGS, task_config_class
from .config.bounds import BOUNDS
from .outputs import atomic_write_text

COMMAND = "python scripts/options_reference.py"


@dataclasses.dataclass(frozen=True)
class Table:
    """One TOML table of one task's recipes: `cls` is the dataclass the loader builds it into, `defaults` an
    instance holding that task's defaults."""

    task: str
    section: str
    cls: type
    defaults: typing.Any


def default_task() -> str:
    """The task of a recipe without a `task` key: the one whose run config the loader picks for None."""
    return next(name for name in RUN_CONFIGS if task_config_class(name) is task_config_class(None))


def task_tables(task: str) -> list[Table]:
    """The tables a recipe with `task = "<task>"` may hold, in the run config's order."""
    run_cls = task_config_class(task)
    hints = typing.get_type_hints(run_cls)
    defaults = run_cls()
    return [
        Table(task, f.name, hints[f.name], getattr(defaults, f.name))
        for f in dataclasses.fields(run_cls)
        if dataclasses.is_dataclass(hints[f.name])
    ]


def _class_source(cls: type) -> tuple[ast.ClassDef, str]:
    source = textwrap.dedent(inspect.getsource(cls))
    node = ast.parse(source).body[0]
    assert isinstance(node, ast.ClassDef), cls
    return node, source


@functools.cache
def own_help(cls: type) -> dict[str, str]:
    """Help for each field that `cls`'s own body declares (see the module docstring for the rules); "" where the
    source has no comment for it."""
    node, source = _class_source(cls)
    comments: dict[int, str] = {}  # line -> comment text
    code: set[int] = set()  # lines holding anything but a comment
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            comments[tok.start[0]] = tok.string.lstrip("#").strip()
        elif tok.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER):
            code.update(range(tok.start[0], tok.end[0] + 1))
    alone = {line for line in comments if line not in code}  # comment-only lines

    fields: list[tuple[str, int, int]] = [  # (name, first line, last line) of each annotated field
        (stmt.target.id, stmt.lineno, stmt.end_lineno or stmt.lineno)
        for stmt in node.body
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)
    ]
    trailing = {
        name: next((comments[n] for n in range(first, last + 1) if n in comments and n in code), "")
        for name, first, last in fields
    }
    claimed: set[int] = set()  # comment lines that lead the field below them
    helps: dict[str, str] = {}
    for name, first, _ in fields:
        if not trailing[name]:
            above: list[int] = []
            line = first - 1
            while line in alone:
                above.insert(0, line)
                line -= 1
            claimed.update(above)
            helps[name] = " ".join(comments[n] for n in above)
    for name, _, last in fields:
        if trailing[name]:
            parts = [trailing[name]]
            line = last + 1
            while line in alone and line not in claimed:
                parts.append(comments[line])
                line += 1
            helps[name] = " ".join(parts)
    return helps


def field_help(cls: type, name: str) -> str:
    """The help of field `name` of dataclass `cls`: its own comment, else the nearest base class's."""
    for klass in cls.__mro__:
        if dataclasses.is_dataclass(klass) and own_help(klass).get(name):
            return own_help(klass)[name]
    return ""


def class_doc(cls: type) -> list[str]:
    """The class docstring as written (not the signature dataclasses makes up): a line per paragraph."""
    doc = ast.get_docstring(_class_source(cls)[0]) or ""
    return [" ".join(paragraph.split()) for paragraph in doc.split("\n\n") if paragraph.strip()]


def type_text(annotation: typing.Any) -> str:
    if isinstance(annotation, str):  # `from __future__ import annotations`: the source text
        return annotation
    return getattr(annotation, "__name__", None) or str(annotation).replace("typing.", "")


def value_text(value: typing.Any) -> str:
    """A default as a recipe writes it (TOML), None as "None (unset)": TOML has no null, leave the key out."""
    if value is None:
        return "None (unset)"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, (tuple, list)):
        return "[" + ", ".join(value_text(v) for v in value) + "]"
    return repr(value)


def _prose(text: str) -> str:
    """Markdown for source text: "<" outside `code spans` is escaped (an "<s>" or "<br />" is no HTML tag)."""
    parts = text.split("`")
    return "`".join(part if i % 2 else part.replace("<", "&lt;") for i, part in enumerate(parts))


def _cell(text: str) -> str:
    return _prose(text).replace("|", "\\|")


def _code(text: str) -> str:
    return f"`{text}`".replace("|", "\\|")


def _paragraphs(paragraphs: list[str]) -> list[str]:
    return [line for paragraph in paragraphs for line in (_prose(paragraph), "")]


def _full_table(table: Table, skip: Sequence[str] = ()) -> list[str]:
    lines = ["| key | type | default | range | help |", "| --- | --- | --- | --- | --- |"]
    for f in dataclasses.fields(table.cls):
        if f.name in skip:
            continue
        default = value_text(getattr(table.defaults, f.name))
        bound = BOUNDS.get(f"{table.section}.{f.name}")
        cells = [_code(f.name), _code(type_text(f.type)), _code(default), bound.describe() if bound else ""]
        cells.append(_cell(field_help(table.cls, f.name)))
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _changed_defaults(table: Table, base: Table) -> list[str]:
    changed = [
        f.name
        for f in dataclasses.fields(table.cls)
        if getattr(table.defaults, f.name) != getattr(base.defaults, f.name)
    ]
    lines = [f"| key | default here | {base.task}'s default |", "| --- | --- | --- |"]
    for name in changed:
        here, there = value_text(getattr(table.defaults, name)), value_text(getattr(base.defaults, name))
        lines.append(f"| {_code(name)} | {_code(here)} | {_code(there)} |")
    return lines


def render() -> str:
    """The whole page, docs/options.md."""
    names, default = ", ".join(json.dumps(name) for name in RUN_CONFIGS), default_task()
    out = [
        "# Options reference",
        "",
        f"*Generated by `{COMMAND}` (from the repository root) from the config dataclasses: the help is each field's "
        "comment in the source. Do not edit by hand; tests/test_options_doc.py fails when the page is stale.*",
        "",
        "A recipe is a TOML file whose tables are the sections below; `--set section.key=value` overrides any key on "
        "the command line (the value is TOML; a bare word is a string). Unknown keys and wrong types are refused "
        "with the key named. Types: `float` also takes an integer; `tuple[str, ...]` is a list of strings (one string "
        "is also taken); `X | None`: leave the key out for None (TOML has no null). A number must be finite (NaN and "
        "infinity are refused) and within its range (config/bounds.py's table, which the command-line flags read "
        "too), wherever it is read: a recipe, `--set`, a run's config.json, the Python API; a model or a training "
        "batch that cannot fit the machine's memory is refused before anything is allocated (config/memory.py).",
        "",
        "## The top level",
        "",
        "| key | type | default | help |",
        "| --- | --- | --- | --- |",
        f"| `task` | `str` | `{json.dumps(default)}` | the task the recipe trains ({names}); it picks the tables "
        "below |",
    ]
    base = {t.section: t for t in task_tables(default)}
    for task in RUN_CONFIGS:
        tables = task_tables(task)
        out += ["", f"## {task}" + (" (the default task)" if task == default else ""), ""]
        out += _paragraphs(class_doc(task_config_class(task)))
        shared = [t for t in tables if t.section in base and t.cls is base[t.section].cls]
        same = [t for t in shared if t.defaults == base[t.section].defaults]
        listed = ", ".join(f"[{t.section}]" for t in tables)
        line = f'A recipe with `task = "{task}"` has the tables {listed}.'
        if task != default and same:
            line += f" {', '.join(f'[{t.section}]' for t in same)}: as {default}'s, with the same defaults."
        out.append(line)
        for table in tables:
            if task != default and table in same:
                continue
            out += ["", f"### {task}: [{table.section}]", ""]
            if task != default and table in shared:
                out += [f"As {default}'s [{table.section}] above; these defaults differ:", ""]
                out += _changed_defaults(table, base[table.section])
                continue
            parent = base.get(table.section)
            if task != default and parent is not None and issubclass(table.cls, parent.cls):  # the shared keys, plus
                inherited = [
                    f.name
                    for f in dataclasses.fields(parent.cls)
                    if getattr(table.defaults, f.name) == getattr(parent.defaults, f.name)
                ]
                out += _paragraphs(class_doc(table.cls))
                out += [f"As {default}'s [{table.section}] above; these keys are its own or differ in default:", ""]
                out += _full_table(table, skip=inherited)
                continue
            out += _paragraphs(class_doc(table.cls)) + _full_table(table) + _sub_tables(task, table)
    return "\n".join(out) + "\n"


def _sub_tables(task: str, table: Table) -> list[str]:
    """The keys of each array of tables in `table` (a field of type tuple[SomeDataclass, ...]: `[[data.corpora]]`)."""
    out: list[str] = []
    for name, hint in typing.get_type_hints(table.cls).items():
        args = typing.get_args(hint)
        if typing.get_origin(hint) is tuple and args and dataclasses.is_dataclass(args[0]):
            cls = typing.cast(type, args[0])
            out += ["", f"#### {task}: [[{table.section}.{name}]]", ""]
            out += _paragraphs(class_doc(cls))
            lines = ["| key | type | default | help |", "| --- | --- | --- | --- |"]
            for f in dataclasses.fields(cls):
                default = "(required)" if f.default is dataclasses.MISSING else value_text(f.default)
                cells = [_code(f.name), _code(type_text(f.type)), _code(default), _cell(field_help(cls, f.name))]
                lines.append("| " + " | ".join(cells) + " |")
            out += lines
    return out


def main(argv: Sequence[str] | None = None, *, default_out: Path | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write the options reference (docs/options.md) from the configs.")
    parser.add_argument("--out", type=Path, default=default_out or Path("docs/options.md"), help="the page")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 when the page is stale")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        try:
            current = args.out.read_text(encoding="utf-8")
        except FileNotFoundError:
            current = ""
        if current != text:
            diff = difflib.unified_diff(
                current.splitlines(), text.splitlines(), str(args.out), "generated", lineterm=""
            )
            print("\n".join(diff), file=sys.stderr)
            print(f"{args.out} is stale: run `{COMMAND}`", file=sys.stderr)
            return 1
        return 0
    atomic_write_text(args.out, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

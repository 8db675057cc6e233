"""docs/options.md is generated from the config dataclasses (issue 49): it must be current, and it must show every
field of every table a recipe may hold, with a help text."""

import dataclasses
import difflib
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from transduce.config.bounds import BOUNDS
from transduce.options_reference import COMMAND, default_task, field_help, main, own_help, render, task_tables
from transduce.tasks import TASKS

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "options.md"


def test_page_is_current():
    written, generated = PAGE.read_text(encoding="utf-8"), render()
    diff = "\n".join(list(difflib.unified_diff(written.splitlines(), generated.splitlines(), lineterm=""))[:40])
    assert written == generated, f"docs/options.md is stale: run `{COMMAND}`\n{diff}"


def _sections(page: str) -> dict[str, str]:
    """'### task: [table]' heading -> the text under it."""
    parts = re.split(r"^### (.+)$", page, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2]))


def test_every_field_of_every_table_has_a_row_with_help():
    sections = _sections(PAGE.read_text(encoding="utf-8"))
    for task in TASKS:
        for table in task_tables(task):
            # a table a task shares unchanged with the default task is documented once, under the default task
            owner = next((t.task for t in task_tables(default_task()) if t.cls is table.cls), task)
            text = sections.get(f"{owner}: [{table.section}]")
            assert text is not None, f"docs/options.md has no section for {task}'s [{table.section}]"
            # a subclass of the default task's section (parsing's [model]) lists its own keys and the changed defaults;
            # the keys it inherits unchanged are the rows of the default task's section
            base = next((t for t in task_tables(default_task()) if t.section == table.section), None)
            for f in dataclasses.fields(table.cls):
                assert field_help(table.cls, f.name), (
                    f"{table.cls.__name__}.{f.name} has no help: give it a trailing # comment in its class"
                )
                where = text
                if base is not None and owner == task and task != default_task() and issubclass(table.cls, base.cls):
                    inherited = f.name in {g.name for g in dataclasses.fields(base.cls)}
                    if inherited and getattr(table.defaults, f.name) == getattr(base.defaults, f.name):
                        where = sections[f"{base.task}: [{table.section}]"]
                row = re.search(rf"^\| `{f.name}` \|.*\|$", where, flags=re.M)
                assert row, f"docs/options.md: no row for {table.section}.{f.name} under {owner}: [{table.section}]"
                cells = re.split(r"(?<!\\)\|", row.group(0))[1:-1]  # an escaped \| stays inside its cell
                assert len(cells) == 5 and cells[4].strip(), f"docs/options.md: {row.group(0)!r} has no help"
                bound = BOUNDS.get(f"{table.section}.{f.name}")  # the range a number is checked against (issue 65)
                assert cells[3].strip() == (bound.describe() if bound else ""), row.group(0)


def test_check_mode_fails_when_stale(tmp_path, capsys):
    page = tmp_path / "options.md"
    assert main(["--out", str(page)]) == 0
    assert main(["--out", str(page), "--check"]) == 0
    page.write_text(page.read_text(encoding="utf-8").replace("| `beam` |", "| `beams` |", 1), encoding="utf-8")
    assert main(["--out", str(page), "--check"]) == 1
    assert "is stale" in capsys.readouterr().err
    assert main(["--out", str(tmp_path / "missing.md"), "--check"]) == 1


def test_script_checks_the_shipped_page():
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "options_reference.py"), "--check"])
    assert done.returncode == 0


@dataclass(frozen=True)
class _Example:
    """The comment rules the page relies on."""

    a: int = 0  # trailing help
    # continued below
    b: int = 0  # b's own
    # a leading block
    # of two lines
    c: int = 0
    d: int = 0  # d's own
    # between a field with a trailing comment and one without: these lines lead e
    e: int = 0
    f: int = 0


@dataclass(frozen=True)
class _Derived(_Example):
    b: int = 1
    f: int = 1  # f's help, given where the default changes


def test_help_comes_from_the_comments():
    assert own_help(_Example) == {
        "a": "trailing help continued below",
        "b": "b's own",
        "c": "a leading block of two lines",
        "d": "d's own",
        "e": "between a field with a trailing comment and one without: these lines lead e",
        "f": "",
    }
    assert field_help(_Derived, "a") == "trailing help continued below"  # inherited
    assert field_help(_Derived, "f") == "f's help, given where the default changes"
    assert field_help(_Derived, "b") == "b's own"  # re-declared without a comment: the base class's help
    assert field_help(_Derived, "e") == "between a field with a trailing comment and one without: these lines lead e"
    assert field_help(_Example, "f") == ""

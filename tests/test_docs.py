"""The reader test: what README.md and docs/ show a reader must work as shown.

(a) Every `transduce` command in a shell block of README.md or docs/*.md is parsed by the real command-line parser
    (`transduce.cli.build_parser`, nothing run): the sub-command exists and argparse accepts every flag, spelled in
    full (abbreviations are refused here, though argparse would take them).
(b) Every relative link in README.md, BENCHMARKS.md and docs/*.md names a file or folder of the repository, and an
    #anchor into a Markdown file names one of its headings (GitHub's slugs).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import shlex
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import unquote

import pytest

from transduce.cli import build_parser

ROOT = Path(__file__).resolve().parent.parent
DOCS = sorted((ROOT / "docs").glob("*.md"))
COMMAND_FILES = [ROOT / "README.md", *DOCS]
LINK_FILES = [ROOT / "README.md", ROOT / "BENCHMARKS.md", *DOCS]

SHELL_FENCES = {"", "sh", "bash", "shell", "console"}  # the info strings of blocks whose lines are commands
FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})\s*([\w+-]*)")
SEPARATORS = {"|", "||", "&&", ";", "&"}  # where one shell command ends and the next begins


def _where(path: Path, line: int) -> str:
    return f"{path.relative_to(ROOT)}:{line}"


def _fences(text: str) -> Iterator[tuple[int, str, list[str]]]:
    """(line number of the first content line, info string, content lines) of every fenced code block."""
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        opened = FENCE.match(lines[i])
        if not opened:
            i += 1
            continue
        marker, info = opened.group(1), opened.group(2).lower()
        body: list[str] = []
        i += 1
        while i < len(lines) and not re.match(rf"^ {{0,3}}{marker[0]}{{{len(marker)},}}\s*$", lines[i]):
            body.append(lines[i])
            i += 1
        yield i - len(body) + 1, info, body
        i += 1


def _without_code(text: str) -> list[str]:
    """The file's lines with fenced blocks blanked and inline code spans removed (links in code are not links)."""
    lines = text.splitlines()
    for start, _, body in _fences(text):
        for n in range(start - 1, start - 1 + len(body)):
            lines[n] = ""
    return [re.sub(r"(`+).+?\1", "", line) for line in lines]


# ------------------------------------------------------------------------------------------------ (a) commands


def _shell_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, command) of every command in the file's shell blocks, continuation lines (`\\`) joined."""
    for start, info, body in _fences(path.read_text(encoding="utf-8")):
        if info not in SHELL_FENCES:
            continue
        pending, first = "", 0
        for n, line in enumerate(body, start=start):
            if info == "console" and not pending and not line.startswith("$ "):
                continue  # a console block shows output too: only its `$ ` lines are commands
            if not pending:
                first = n
            if line.rstrip().endswith("\\"):
                pending += line.rstrip()[:-1] + " "
                continue
            yield first, pending + line
            pending = ""
        if pending:
            yield first, pending


def _reader_form(command: str) -> str | None:
    """The command as a shell would read it, with the usage notation docs use resolved; None when it holds a
    placeholder no value can stand in for (`...`, `<FILE>`), which is then not checked.

    One pass that knows quotes, so nothing inside '...' or "..." is touched:
    - `# comment` (a # at the start of a word) ends the command, as in a shell;
    - `[--flag VALUE]`: optional parts are kept, brackets removed (`[` opening a word, its `]` closing one);
    - `a|b|c` inside a word (no space beside the `|`) is a choice: the first is kept. Pipes in these documents are
      written with spaces (`cmd | head`), so they stay pipes;
    - a file-descriptor digit before a redirection (`2> log`) is dropped, so that the redirection is removed whole.
    Capitalised names (`RUN`, `GOLD TEST`, `DIR`) need no care: to argparse they are ordinary values; a lone capital
    (`N`) is a number.
    """
    text = command.strip().removeprefix("$ ")
    out: list[str] = []
    quote, depth, i = "", 0, 0
    while i < len(text):
        c = text[i]
        at_word_start = i == 0 or text[i - 1].isspace()
        at_word_end = i + 1 == len(text) or text[i + 1].isspace() or text[i + 1] == "]"
        if quote:
            quote = "" if c == quote else quote
        elif c in "'\"":
            quote = c
        elif c == "\\" and i + 1 < len(text):
            out.append(text[i : i + 2])
            i += 2
            continue
        elif c == "#" and at_word_start:
            break
        elif c == "[" and at_word_start:
            depth += 1
            i += 1
            continue
        elif c == "]" and depth and at_word_end:
            depth -= 1
            i += 1
            continue
        elif c == "|" and not at_word_start and not at_word_end:
            while i < len(text) and not text[i].isspace() and text[i] != "]":
                i += 1  # the other choices
            continue
        elif c.isdigit() and at_word_start and text[i + 1 : i + 2] == ">":
            i += 1
            continue
        out.append(c)
        i += 1
    text = "".join(out)
    if re.search(r"\.\.\.|<[A-Za-z][\w-]*>", text):
        return None
    # a lone capital stands for a number by convention (`--threads N`, `--last N`): give argparse one
    return re.sub(r"(?<!\S)[A-Z](?!\S)", "1", text)


def _transduce_argv(words: list[str]) -> list[str] | None:
    """The arguments given to transduce by one simple command, or None when it does not run transduce:
    `transduce ...`, `.venv/bin/transduce ...`, `VAR=x transduce ...`, and `python -m transduce ...` or
    `torchrun ... -m transduce ...` (what follows `-m transduce`)."""
    while words and re.match(r"^[A-Za-z_]\w*=", words[0]):
        words = words[1:]
    if not words:
        return None
    if words[0] == "transduce" or words[0].endswith("/transduce"):
        return words[1:]
    for k in range(len(words) - 1):
        if words[k] == "-m" and words[k + 1] == "transduce":
            return words[k + 2 :]
    return None


def _commands(text: str) -> list[list[str]]:
    """The transduce argument lists of a shell line: split at pipes and ;/&&, redirections removed."""
    lexer = shlex.shlex(text, posix=True, punctuation_chars="|&;<>")
    lexer.whitespace_split, lexer.commenters = True, ""
    found: list[list[str]] = []
    words: list[str] = []
    tokens = list(lexer)
    i = 0
    while i <= len(tokens):
        token = tokens[i] if i < len(tokens) else ";"
        if token in SEPARATORS:
            argv = _transduce_argv(words)
            if argv is not None:
                found.append(argv)
            words = []
        elif set(token) <= set("<>"):
            i += 1  # the redirection's file
        else:
            words.append(token)
        i += 1
    return found


def _collect() -> tuple[list[tuple[str, list[str]]], list[str]]:
    checked, skipped = [], []
    for path in COMMAND_FILES:
        for line, command in _shell_lines(path):
            if not re.search(r"\btransduce\b", command):
                continue  # a listing, or another program's command
            text = _reader_form(command)
            if text is None:
                skipped.append(f"{_where(path, line)}: {command.strip()}")
                continue
            try:
                found = _commands(text)
            except ValueError as err:  # an unclosed quote: the reader's shell would refuse it too
                found = [[f"<{err}: {command.strip()}>"]]
            checked += [(_where(path, line), argv) for argv in found]
    return checked, skipped


COMMANDS, SKIPPED = _collect()


def _strict(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The parser and all its sub-parsers with abbreviations off: a flag in the documents must exist as written."""
    parser.allow_abbrev = False
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                _strict(sub)
    return parser


@pytest.fixture(scope="module")
def cli() -> argparse.ArgumentParser:
    return _strict(build_parser())


def parse_error(cli: argparse.ArgumentParser, argv: list[str]) -> str | None:
    """argparse's complaint about argv, or None when it accepts it (--help counts as accepted)."""
    err, out = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            cli.parse_args(argv)
    except SystemExit as stop:
        return None if stop.code == 0 else err.getvalue().strip() or f"exit status {stop.code}"
    return None


def test_the_documents_show_commands():
    """The collection itself works: a broken fence reader would otherwise make the next test pass on nothing."""
    files = {where.split(":")[0] for where, _ in COMMANDS}
    assert "README.md" in files and len(files) >= 5, files
    assert len(COMMANDS) >= 40, f"only {len(COMMANDS)} commands found"
    assert len(SKIPPED) <= 5, SKIPPED  # placeholders should stay rare: every skipped command is unchecked


@pytest.mark.parametrize("where, argv", COMMANDS, ids=[where for where, _ in COMMANDS])
def test_documented_command_parses(cli, where, argv):
    error = parse_error(cli, argv)
    assert error is None, f"{where}: transduce {shlex.join(argv)}\n{error}"


def test_the_parser_refuses_what_it_should(cli):
    """The check can fail: an unknown flag, an abbreviation, an unknown sub-command and a missing value."""
    assert parse_error(cli, ["translate", "runs/x", "--beam", "4"]) is None
    assert "unrecognized arguments: --beams" in parse_error(cli, ["translate", "runs/x", "--beams", "4"])
    assert "unrecognized arguments: --quant" in parse_error(
        cli, ["export", "ctranslate2", "runs/x", "--out", "o", "--quant", "int8"]
    )
    assert "invalid choice" in parse_error(cli, ["transalte", "runs/x"])
    assert "required" in parse_error(cli, ["train", "multi30k"])


def test_the_reader_form_of_usage_notation():
    assert _commands(_reader_form("transduce serve RUN [--engine torch|ctranslate2 [--exact]] [--port 8000]")) == [
        ["serve", "RUN", "--engine", "torch", "--exact", "--port", "8000"]
    ]
    assert _commands(_reader_form("transduce translate RUN < in.en 2> log | head -3  # a comment")) == [
        ["translate", "RUN"]
    ]
    assert _commands(_reader_form("transduce train g --out r --set 'data.corpora=[]'")) == [
        ["train", "g", "--out", "r", "--set", "data.corpora=[]"]
    ]
    assert _commands(_reader_form("torchrun --nproc-per-node 8 -m transduce train w --out r")) == [
        ["train", "w", "--out", "r"]
    ]
    assert _reader_form("transduce classify train|predict ...") is None
    assert _reader_form("transduce average RUN --last N") == "transduce average RUN --last 1"


# --------------------------------------------------------------------------------------------------- (b) links

LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)")
HTML = re.compile(r"""<(?:a|img)\b[^>]*?\b(?:href|src)=["']([^"']+)["']""")
HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading: its rendered text in lower case, punctuation dropped (letters, digits, `_`,
    `-` and spaces kept), spaces turned into hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link reads as its text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """The anchors of a Markdown file's ATX headings (`#` headings: the only kind these documents use), with
    GitHub's -1, -2 ... for repeated ones, and any <a name/id="..."> in it."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    text = path.read_text(encoding="utf-8")
    fenced = {n for start, _, body in _fences(text) for n in range(start, start + len(body))}
    for n, line in enumerate(text.splitlines(), start=1):
        heading = HEADING.match(line)
        if heading and n not in fenced:
            slug = github_slug(heading.group(2))
            found.add(f"{slug}-{seen[slug]}" if slug in seen else slug)
            seen[slug] = seen.get(slug, 0) + 1
    found.update(re.findall(r"""<a\s[^>]*?\b(?:name|id)=["']([^"']+)["']""", text))
    return found


def _links(path: Path) -> Iterator[tuple[int, str]]:
    for n, line in enumerate(_without_code(path.read_text(encoding="utf-8")), start=1):
        for pattern in (LINK, REFERENCE, HTML):
            for target in pattern.findall(line):
                yield n, target


def link_problem(source: Path, target: str) -> str | None:
    """Why a link from `source` does not resolve, or None (web links and mail are not followed)."""
    if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:|^//", target):
        return None
    file_part, _, fragment = target.partition("#")
    dest = (source.parent / unquote(file_part)).resolve() if file_part else source
    if not dest.is_relative_to(ROOT):
        return f"{target}: outside the repository"
    if not dest.exists():
        return f"{target}: no such file"
    if fragment and dest.suffix == ".md" and unquote(fragment) not in anchors(dest):
        return f"{target}: no heading #{fragment} in {dest.relative_to(ROOT)}"
    return None


LINKS = [(path, n, target) for path in LINK_FILES for n, target in _links(path)]


def test_the_documents_have_links():
    assert len(LINKS) >= 20, f"only {len(LINKS)} links found"
    assert any("#" in target for _, _, target in LINKS)


def test_every_relative_link_resolves():
    problems = [f"{_where(path, n)}: {why}" for path, n, target in LINKS if (why := link_problem(path, target))]
    assert not problems, "\n".join(problems)


def test_a_broken_link_is_found(tmp_path):
    """The check can fail: a missing file, a missing heading, a path out of the repository."""
    page = ROOT / "docs" / "data.md"
    assert link_problem(page, "../BENCHMARKS.md") is None
    assert link_problem(page, "#getting-wmt14") is None
    assert "no such file" in link_problem(page, "no-such-page.md")
    assert "no heading" in link_problem(page, "#no-such-heading")
    assert "outside" in link_problem(page, "../../elsewhere.md")
    assert github_slug("Paper-scale data: prepare and train from the cache (issue 48)") == (
        "paper-scale-data-prepare-and-train-from-the-cache-issue-48"
    )
    assert github_slug("The model, and where it departs from the [paper](x.md) `v1`") == (
        "the-model-and-where-it-departs-from-the-paper-v1"
    )


def test_recipe_headers_link_their_figures_instead_of_repeating_them():
    """A figure lives in one place (BENCHMARKS.md): every BENCHMARKS.md#section a recipe's header names exists, and a
    header holds no result figure of its own (BLEU, F1, accuracy or a speed). wmt14-big has measured nothing yet."""
    benchmarks = anchors(ROOT / "BENCHMARKS.md")
    for recipe in sorted((ROOT / "src" / "transduce" / "recipes").glob("*.toml")):
        header = "\n".join(line for line in recipe.read_text(encoding="utf-8").splitlines() if line.startswith("#"))
        linked = re.findall(r"BENCHMARKS\.md#([\w-]+)", header)
        assert linked or recipe.stem == "wmt14-big", f"{recipe.name}: its header links no BENCHMARKS.md section"
        assert set(linked) <= benchmarks, f"{recipe.name}: no such BENCHMARKS.md section: {set(linked) - benchmarks}"
        figure = re.search(r"\b\d{2,}\.\d+\b|\d[\d,]* (?:target )?(?:tokens|sentences|steps)/s", header)
        assert figure is None, f"{recipe.name}: its header repeats a figure ({figure.group(0)!r}): link it instead"

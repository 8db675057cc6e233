"""The `transduce` command: argparse sub-commands, nothing else. User mistakes -> one line on stderr, exit 1."""

from __future__ import annotations

import argparse
import sys


def _user_errors() -> tuple[type[BaseException], ...]:
    from ..config import ConfigError
    from ..data import DataError
    from ..data.tokenizer import TokenizerError
    from ..data.trees import TreeError
    from ..export.ctranslate2 import ExportError  # does not import ctranslate2 itself
    from ..export.hf_import import HFImportError
    from ..outputs import OutputError
    from ..runs import CheckpointError
    from ..training.loop import TrainingError

    return (
        ConfigError,
        DataError,
        CheckpointError,
        TokenizerError,
        TrainingError,
        OutputError,
        ExportError,
        TreeError,
        HFImportError,
    )


def _environment_error(err: OSError) -> str:
    """A disk, permission or file-system problem, in one line: what failed, where, and why."""
    where = f"{err.filename}: " if err.filename else ""
    why = err.strerror or str(err)
    hint = {28: " (the disk is full)", 30: " (read-only file system)", 13: " (no permission)"}.get(err.errno or 0, "")
    return f"{where}{why}{hint}"


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage mistake is one line on stderr (and exit status 2), like every other error."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    """One sub-command table per module: training, decoding, pictures, deploy, importing, parsing."""
    from . import decoding, deploy, importing, parsing, pictures, training

    parser = _Parser(prog="transduce", description=__doc__.split(":")[0] if __doc__ else None)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in (training, decoding, pictures, deploy, importing, parsing):
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except _user_errors() as err:
        print(f"transduce {args.command}: error: {err}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # the reader of our output went away (`| head`): not an error
        return 0
    except OSError as err:  # full or read-only disk, permissions, a path that is not what it should be
        print(f"transduce {args.command}: error: {_environment_error(err)}", file=sys.stderr)
        return 1
    except MemoryError:
        print(f"transduce {args.command}: error: out of memory (try smaller batches or inputs)", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # training has saved a checkpoint by now (training/loop.py)
        return 130

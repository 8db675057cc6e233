"""The prepared-data cache every task keeps in RUN/data: reused while the inputs' contents and the options are
unchanged (its summary.json records the key and each input file's digest), refused when a run being resumed
finds them changed, rebuilt atomically otherwise (outputs.atomic_folder: never over a folder that is not ours)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from ..outputs import atomic_folder, names_file, read_manifest
from .text import DataError


def changed_inputs(summary: dict, digests: dict[str, str]) -> str:
    """Why a cache no longer matches its inputs, naming the files whose contents changed (for the resume refusal)."""
    old = summary.get("inputs", {})
    changed = [path for path, digest in digests.items() if path in old and old[path] != digest]
    if changed:
        more = f" (and {len(changed) - 1} more file(s))" if changed[1:] else ""
        return f"{changed[0]}: its contents changed{more}"
    added = sorted(set(digests) - set(old))
    return f"the input files differ ({', '.join(added)})" if added else "the data options changed"


def reuse_or_build(
    out_dir: Path,
    key: str,
    digests: dict[str, str],
    build: Callable[[Path], dict],
    *,
    frozen: bool,
    log: Callable[[str], None],
) -> dict | None:
    """Reuse `out_dir` when its summary carries `key` (returns None); else, unless `frozen` (a resumed run: refused,
    naming the changed file), call build(tmp) to write a fresh cache into a temporary folder, record the key and
    digests in its summary.json, and rename it into place. Returns the new summary. A cache of another format
    (outputs.FORMAT) is refused, whatever its key."""
    read_manifest(out_dir)  # refuses a cache of another format
    summary_path = out_dir / "summary.json"
    if frozen and not summary_path.is_file():
        raise DataError(
            f"{out_dir}: this run's prepared data is missing; preparing it again could give other token ids than "
            "the ones its model was trained on: restore the folder, or train into a new --out"
        )
    if summary_path.is_file():
        summary = json.loads(summary_path.read_text(encoding="utf-8"))
        if summary.get("cache_key") == key:
            log(f"data: reusing the cache in {out_dir} (key {summary.get('cache_key')})")
            return None
        if frozen:
            raise DataError(
                f"{changed_inputs(summary, digests)} since this run prepared its data in {out_dir}; "
                "the model was trained on that data: restore it, or train into a new --out"
            )
        log(f"data: inputs or options changed since {out_dir} was prepared; preparing again")
    with atomic_folder(out_dir, "data") as tmp:
        summary = build(tmp)
        summary.update(cache_key=key, inputs=digests)
        with names_file(tmp / "summary.json"):
            (tmp / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    return summary

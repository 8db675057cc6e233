"""Several language pairs in one server: `transduce serve RUN1 RUN2 ...` (or a folder whose subfolders are runs or
CTranslate2 exports). Which runs, checked before any model is loaded; each model loaded once; which of them a
request's `source` and `target` name.

Why one server: an app is given one URL and asks LibreTranslate's `/languages` what it can translate, so every pair
a user has trained should answer there; one process also keeps one event loop and one set of limits. Each pair is a
Service of its own (service.py) with its own dynamic batcher, and every batcher runs its model on the same one
worker thread (batcher.py): each model's kernels already use every core (`--threads` sets the process's), so two
models decoding at once would only contend for the cores.

What is refused, in one line before anything is loaded: a run of another task among several (a classifier or a
parser has no language pair to route by), a run whose languages are unknown (no `data.src`/`data.tgt` in its config,
an export whose manifest names none), two runs of one pair (naming both: which to serve is the user's choice), and
`--glossary` with several runs: a glossary file names no languages, so which pair it belongs to would be a guess (a
request's own glossary still applies, to the pair the request names).

Routing: LibreTranslate's routes take the mapping (source, target) -> Service as they are (libretranslate.py).
`/v1/translate` and `/v1/attention` take an optional pair (`choose`): required only when the server holds several,
checked when given (codes matched without regard to case, as LibreTranslate's), a 422 naming the served pairs when
it is missing or not served.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .service import ApiError, Service, describe_run, load_predictor

Pairs = Mapping[tuple[str, str], Service]
SERVER_WIDE = ("task", "engine", "exact", "precision", "limits", "batching")  # /v1/info's keys not of one pair


def served_pairs(service: Service) -> dict[tuple[str, str], Service]:
    """The pair a translation service serves, from its run's languages (none when the run names none)."""
    languages = service.metadata.get("languages") or {}
    if service.task != "translation" or not languages.get("source") or not languages.get("target"):
        return {}
    return {(str(languages["source"]), str(languages["target"])): service}


# ---------------------------------------------------------------------------------------------------- the runs
def runs_of(paths: Sequence[str | Path]) -> list[Path]:
    """The runs `serve` was given: each path as it is, but a folder of runs (no config.json or weights of its own,
    and at least one subfolder holding a config.json: a run or an export) is its subfolders, in name order."""
    runs: list[Path] = []
    for path in map(Path, paths):
        runs.extend(_subfolders(path) if _is_folder_of_runs(path) else [path])
    return runs


def _subfolders(folder: Path) -> list[Path]:
    return sorted(child for child in folder.iterdir() if child.is_dir() and (child / "config.json").is_file())


def _is_folder_of_runs(path: Path) -> bool:
    if not path.is_dir() or (path / "config.json").exists() or (path / "model.safetensors").exists():
        return False
    return bool(_subfolders(path))


def check_runs(runs: Sequence[str | Path], engine: str, *, glossary: bool = False) -> None:
    """Refuse (ConfigError, one line) several runs that cannot be served together, before any is loaded (see the
    module's docstring). One run is served as it always was, and is not checked here."""
    if len(runs) < 2:
        return
    if glossary:
        check_glossary(len(runs))
    described = [describe_run(run, engine) for run in runs]
    _check_models([(str(run), kind, _pair(languages)) for run, (_, kind, languages) in zip(runs, described)])


def check_glossary(models: int) -> None:
    """A server's glossary serves one model (ConfigError, one line, for several)."""
    from ..config import ConfigError

    if models > 1:
        raise ConfigError(
            f"--glossary serves one run, not {models}: a glossary file names no languages, so which pair it is for "
            "would be a guess (a /v1/translate request's own glossary applies to the pair it names)"
        )


def pairs_of(services: Sequence[Service]) -> dict[tuple[str, str], Service]:
    """Every pair the services serve; several are refused (ConfigError, one line) as `check_runs` refuses their runs
    (for models handed over in Python: app.create_pairs_app)."""
    served = [served_pairs(service) for service in services]
    names = [str(service.metadata.get("run", f"model {i + 1}")) for i, service in enumerate(services)]
    _check_models([(name, s.task, next(iter(pair), None)) for name, s, pair in zip(names, services, served)])
    return {key: service for pair in served for key, service in pair.items()}


def _pair(languages: Mapping[str, str] | None) -> tuple[str, str] | None:
    return (languages["source"], languages["target"]) if languages else None


def _check_models(models: Sequence[tuple[str, str, tuple[str, str] | None]]) -> None:
    """Each model's (name, task, pair or None); several must all be translation models, each of a known pair of its
    own (pairs compared without regard to case, as requests name them)."""
    from ..config import ConfigError

    if len(models) < 2:
        return
    seen: dict[tuple[str, str], str] = {}
    for name, kind, pair in models:
        if kind != "translation":
            raise ConfigError(f"{name}: a {kind} run cannot be served beside other runs (only translation runs can)")
        if pair is None:
            raise ConfigError(
                f"{name}: its languages are unknown (no data.src and data.tgt in its config.json, or none in its "
                "export's manifest), so requests cannot be routed to it: serve it alone"
            )
        key = (pair[0].lower(), pair[1].lower())
        if key in seen:
            raise ConfigError(f"{seen[key]} and {name} both translate {pair[0]} → {pair[1]}: serve one of them")
        seen[key] = name


def load_models(
    runs: Sequence[str | Path], *, engine: str = "torch", glossary: bool = False, **options: Any
) -> list[tuple[Any, dict]]:
    """Each run's predictor and metadata (service.load_predictor, each model once), after `check_runs`."""
    check_runs(runs, engine, glossary=glossary)
    return [load_predictor(run, engine=engine, **options) for run in runs]


# ---------------------------------------------------------------------------------------------------- requests
def _shown(pairs: Pairs) -> str:
    return ", ".join(f"{source} → {target}" for source, target in pairs)


def sources_into(pairs: Pairs, target: str | None) -> list[str]:
    """The served sources that translate into `target` (matched without regard to case; every source where it is
    None or none does), each once: where a "source: auto" request's language is looked for."""
    into = [s for s, t in pairs if target is None or t.lower() == target.lower()]
    return list(dict.fromkeys(into or [s for s, _ in pairs]))


def choose(pairs: Pairs, default: Service, source: str | None, target: str | None) -> Service:
    """The service of the pair a /v1 request names (`source`, `target`, either may be left out where it leaves one
    pair); with neither given on a server of at most one pair, `default` (its only service)."""
    if source is None and target is None and len(pairs) <= 1:
        return default
    if not pairs:
        raise ApiError(
            422, "pair_not_served", "this server's model names no languages: leave out source and target", pairs=[]
        )
    found = [
        service
        for (s, t), service in pairs.items()
        if (source is None or s.lower() == source.lower()) and (target is None or t.lower() == target.lower())
    ]
    if len(found) == 1:
        return found[0]
    listed = [[s, t] for s, t in pairs]
    if found:
        raise ApiError(
            422,
            "pair_required",
            f"this server translates several language pairs ({_shown(pairs)}): give source and target",
            pairs=listed,
        )
    asked = f"{source} → {target}" if source and target else f"from {source}" if source else f"into {target}"
    message = f"no pair {asked} is served; this server translates {_shown(pairs)}"
    raise ApiError(422, "pair_not_served", message, pairs=listed)


def pairs_info(services: Sequence[Service]) -> dict[str, Any]:
    """/v1/info of a server of several pairs: what is the server's (task, engine, limits, batching) once, and per
    pair the rest (its languages, run, parameters, decoding defaults). `max_beam` is the bound every pair allows."""
    infos = [service.info() for service in services]
    first = infos[0]
    head: dict[str, Any] = {key: first[key] for key in ("task", "engine", "exact", "precision") if key in first}
    pairs = [{key: value for key, value in info.items() if key not in SERVER_WIDE} for info in infos]
    limits = {**first["limits"], "max_beam": min(info["limits"]["max_beam"] for info in infos)}
    return {**head, "pairs": pairs, "limits": limits, "batching": first["batching"]}

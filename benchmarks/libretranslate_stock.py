"""A stock LibreTranslate serving a package of `transduce export argos`, against `transduce translate --engine
ctranslate2` with Argos's fixed settings (issue 75).

Figures: BENCHMARKS.md, "A stock LibreTranslate serving our package (issue 75)".

    .venv/bin/python benchmarks/libretranslate_stock.py RUN --src FILE [--lines N] [--venv /tmp/lt-venv]
        [--version 1.9.6] [--batch 16] [--tag T] [--argos-threads N] [--start-timeout 300] [--request-timeout 300]
        [--keep DIR]
RUN: a run directory (or a .safetensors weights file inside one); FILE: source lines, plain or .gz (the first
--lines of it). Steps:
    1. LibreTranslate's own venv, outside the repository (--venv; created, or reused when it already holds
       libretranslate==--version): `pip install libretranslate==VERSION` there (1.9.6 pins argos-translate-lt 1.12.1,
       ctranslate2, sentencepiece, onnxruntime and minisbd; neither torch nor stanza);
    2. `transduce export argos RUN --out WORK/pkg.argosmodel`, installed by that venv's own Argos
       (`argostranslate.package.install_from_path`) into WORK/argos/packages, with every folder Argos reads from the
       environment (HOME, XDG_DATA_HOME, XDG_CONFIG_HOME, XDG_CACHE_HOME, ARGOS_PACKAGES_DIR) under WORK;
    3. `libretranslate --host 127.0.0.1 --port FREE --load-only SRC,TGT --disable-web-ui
       --disable-files-translation`, its working folder and TMPDIR under WORK, kept offline by:
         - ARGOS_PACKAGE_INDEX=file://WORK/index/, a folder whose index.json lists no package: with fewer than two
           packages installed LibreTranslate's start-up (libretranslate/init.py `check_and_install_models`) fetches
           Argos's package index, then would download the `--load-only` packages it lacks and MiniSBD's models.
           From the empty index it learns of no package and stops, without a socket, at "Cannot update models
           (normal if you're offline): Unavailable language codes", then serves what is installed. (An index that
           cannot be read is worse: argostranslate's `get_available_packages` retries itself until Python's
           recursion limit, a thousand logged errors.) No flag of LibreTranslate skips that attempt
           (`--update-models` is off by default);
         - a sitecustomize.py on the server's PYTHONPATH (Python imports it at start-up, before LibreTranslate):
           it replaces `argostranslate.translate.MiniSBDSentencizer`, which would download MiniSBD's ONNX model
           for the source language on the first translation, by the stand-in tests/test_argos.py uses (a line is
           one sentence), and refuses, logging "lt-offline: refused", every name lookup or connection that is not
           loopback: the count of such attempts is printed (0 expected);
    4. waits for `GET /languages` (exit status 2, with the server's log, if it exits or does not answer within
       --start-timeout), checks that the pair is listed, posts the lines to `POST /translate` (`q` a list of
       --batch lines a request, `source`, `target`, `format: text`; each request bounded by --request-timeout), and
       stops the server whatever happens (SIGTERM, then SIGKILL after 15 s).
Ours: `transduce translate RUN --engine ctranslate2 --beam 4 --alpha 0.2 --length-penalty length` (Argos: beam 4,
log P / |Y|^0.2; see export/argos.py's notes) on the same lines. A line whose two outputs differ is explained, where it
can be, by what Argos and LibreTranslate do after the search: Argos reads "_" as a space; LibreTranslate's `/translate`
passes every translation through its `improve_translation_formatting` (end punctuation copied from the source, case of
the first letter, an all-lowercase or all-uppercase source's case) and `html.unescape`, both called in the
LibreTranslate venv on our output (their code is run, not copied); and where our search ends at once (an empty line)
Argos decodes at least one token (checked against our --nbest 4: the best non-empty hypothesis). Prints the pair listed
(yes/no), lines identical / total, lines identical once LibreTranslate's post-edit is applied to ours, each differing
line with both outputs and its reason, timings (LibreTranslate's start-up, its first request that loads the model, the
lines' requests; our command's wall time, its on-the-fly export and loading included), then a JSON summary. Argos
translates a request's texts one sentence at a time on CTranslate2's intra_threads 0 (ARGOS_INTRA_THREADS;
--argos-threads sets it), our command all lines in batches of 4,096 tokens. Exit status: 0; 1 when the pair is not
listed or a difference is unexplained; 2 when the server cannot start.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
import urllib.error
import urllib.request
from pathlib import Path

from transduce.export.argos import ARGOS_BEAM, ARGOS_LENGTH_PENALTY, package_metadata

REPO = Path(__file__).resolve().parent.parent
TRANSDUCE = [sys.executable, "-m", "transduce"]

# Put on the LibreTranslate process's PYTHONPATH as sitecustomize.py.
SITECUSTOMIZE = textwrap.dedent(
    '''
    """Keeps a stock LibreTranslate offline (benchmarks/libretranslate_stock.py)."""
    import ipaddress
    import socket
    import sys


    def _loopback(host):
        if isinstance(host, bytes):
            host = host.decode("ascii", "replace")
        if host in (None, "", "localhost"):
            return True
        try:
            return ipaddress.ip_address(str(host).split("%")[0]).is_loopback
        except ValueError:
            return False


    def _refuse(what):
        print(f"lt-offline: refused {what}", file=sys.stderr, flush=True)
        raise OSError(f"lt-offline: {what} refused (loopback only)")


    _getaddrinfo = socket.getaddrinfo
    _connect, _connect_ex = socket.socket.connect, socket.socket.connect_ex


    def getaddrinfo(host, *args, **kwargs):
        if not _loopback(host):
            _refuse(f"name lookup {host!r}")
        return _getaddrinfo(host, *args, **kwargs)


    def _check(sock, address):
        if sock.family in (socket.AF_INET, socket.AF_INET6) and not _loopback(address[0]):
            _refuse(f"connection to {address!r}")


    def connect(self, address):
        _check(self, address)
        return _connect(self, address)


    def connect_ex(self, address):
        _check(self, address)
        return _connect_ex(self, address)


    socket.getaddrinfo = getaddrinfo
    socket.socket.connect, socket.socket.connect_ex = connect, connect_ex

    # MiniSBD downloads its model on first use: one sentence per line instead, as tests/test_argos.py does.
    import argostranslate.translate as _translate


    class OneSentencePerLine:  # stands in for argostranslate.sbd.MiniSBDSentencizer
        def __init__(self, pkg):
            self.pkg = pkg

        def split_sentences(self, text):
            return [text] if text.strip() else []


    _translate.MiniSBDSentencizer = OneSentencePerLine
    print("lt-offline: MiniSBD replaced by one sentence per line; non-loopback sockets refused", file=sys.stderr)
    '''
)

# Run in the LibreTranslate venv: its own post-edit of a translation, applied to ours.
POST_EDIT = textwrap.dedent(
    """
    import json, sys
    from html import unescape
    from libretranslate.language import improve_translation_formatting
    pairs = json.load(sys.stdin)
    json.dump([unescape(improve_translation_formatting(src, out)) for src, out in pairs], sys.stdout)
    """
)


def post_edit(venv: Path, env: dict, pairs: list[tuple[str, str]]) -> list[str]:
    """What LibreTranslate's /translate makes of each (source, Argos's translation): its own code, in its venv."""
    proc = subprocess.run(
        [venv_python(venv), "-c", POST_EDIT],
        input=json.dumps(pairs),
        capture_output=True,
        text=True,
        env=env,
        check=True,
        timeout=300,
    )
    return json.loads(proc.stdout)


def venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def installed_version(venv: Path, name: str) -> str | None:
    code = f"import importlib.metadata as m\ntry: print(m.version({name!r}))\nexcept m.PackageNotFoundError: pass"
    if not venv_python(venv).exists():
        return None
    proc = subprocess.run([venv_python(venv), "-c", code], capture_output=True, text=True, timeout=120)
    return proc.stdout.strip() or None


def ensure_venv(venv: Path, version: str) -> dict:
    """LibreTranslate==version in its own venv (created or reused); the versions that matter, as installed."""
    if venv.resolve().is_relative_to(REPO):
        raise SystemExit(f"{venv}: LibreTranslate's venv goes outside the repository")
    if installed_version(venv, "libretranslate") != version:
        if not venv_python(venv).exists():
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        print(f"installing libretranslate=={version} into {venv} ...", flush=True)
        subprocess.run([venv_python(venv), "-m", "pip", "install", "-q", f"libretranslate=={version}"], check=True)
    names = ("libretranslate", "argos-translate-lt", "ctranslate2", "sentencepiece", "minisbd", "torch", "stanza")
    return {name: installed_version(venv, name) for name in names}


def read_source(path: Path, n: int | None) -> list[str]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        lines = f.read().splitlines()
    return lines[:n] if n else lines


def argos_env(work: Path) -> dict:
    """The environment of every LibreTranslate-venv process: Argos's folders under WORK, no index reachable."""
    root = work / "argos"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LT_", "ARGOS_", "PYTHON", "VIRTUAL_ENV"))}
    env |= {
        "HOME": str(root / "home"),
        "XDG_DATA_HOME": str(root / "data"),
        "XDG_CONFIG_HOME": str(root / "config"),
        "XDG_CACHE_HOME": str(root / "cache"),
        "ARGOS_PACKAGES_DIR": str(root / "packages"),
        "ARGOS_PACKAGE_INDEX": (work / "index").as_uri() + "/",
        "TMPDIR": str(work / "tmp"),
    }
    for folder in ("home", "data", "config", "cache", "packages"):
        (root / folder).mkdir(parents=True, exist_ok=True)
    (work / "tmp").mkdir(exist_ok=True)
    (work / "index").mkdir(exist_ok=True)
    (work / "index" / "index.json").write_text("[]")  # Argos's package index, of no package
    return env


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(url: str, body: dict | None = None, timeout: float = 10.0):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read().decode("utf-8"))


def start_server(venv: Path, work: Path, env: dict, pair: tuple[str, str], timeout: float):
    """The LibreTranslate process, its URL, its log and its start-up seconds; exits 2 when it does not answer."""
    site = work / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    (work / "lt").mkdir()
    port = free_port()
    command = [
        str(venv / "bin" / "libretranslate"),
        *("--host", "127.0.0.1", "--port", str(port), "--load-only", ",".join(pair)),
        *("--disable-web-ui", "--disable-files-translation"),
    ]
    log_path = work / "libretranslate.log"
    env = {**env, "PYTHONPATH": str(site), "PYTHONUNBUFFERED": "1"}
    start = time.perf_counter()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            command, cwd=work / "lt", env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    url = f"http://127.0.0.1:{port}"
    print("started:", " ".join(command[1:]), flush=True)
    while time.perf_counter() - start < timeout:
        if proc.poll() is not None:
            break
        try:
            languages = http(url + "/languages", timeout=2.0)
            return proc, url, log_path, languages, time.perf_counter() - start
        except (urllib.error.URLError, OSError, ValueError):
            time.sleep(0.5)
    why = f"exited with status {proc.returncode}" if proc.poll() is not None else f"no answer in {timeout:g} s"
    stop_server(proc)
    print(log_path.read_text()[-4000:], file=sys.stderr)
    print(f"LibreTranslate did not start: {why}", file=sys.stderr)
    raise SystemExit(2)


def stop_server(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=15)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("run")
    p.add_argument("--src", required=True, type=Path, help="source lines, plain or .gz")
    p.add_argument("--lines", type=int, default=None, help="the first N lines only")
    p.add_argument(
        "--venv", type=Path, default=Path("/tmp/lt-venv"), help="LibreTranslate's venv (default %(default)s)"
    )
    p.add_argument("--version", default="1.9.6", help="LibreTranslate's version (default %(default)s)")
    p.add_argument("--batch", type=int, default=16, help="lines a /translate request (q a list)")
    p.add_argument("--tag", default="", help="as export argos --tag and translate --tag")
    p.add_argument(
        "--argos-threads",
        type=int,
        default=None,
        help="ARGOS_INTRA_THREADS for the server (default: unset, Argos's 0: CTranslate2 chooses)",
    )
    p.add_argument("--start-timeout", type=float, default=300.0)
    p.add_argument("--request-timeout", type=float, default=300.0)
    p.add_argument(
        "--keep", type=Path, default=None, help="work in this new folder and keep it (default: a temporary one)"
    )
    args = p.parse_args()

    versions = ensure_venv(args.venv, args.version)
    print("LibreTranslate venv:", args.venv, json.dumps(versions), flush=True)
    if args.keep:
        args.keep.mkdir(parents=True)
        work = args.keep.resolve()
    else:
        work = Path(tempfile.mkdtemp(prefix="lt-stock-"))
    try:
        return compare(args, work, versions)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


def compare(args, work: Path, versions: dict) -> int:
    lines = read_source(args.src, args.lines)
    src_file = work / "src.txt"
    src_file.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    package = work / "pkg.argosmodel"
    tag = ["--tag", args.tag] if args.tag else []
    subprocess.run([*TRANSDUCE, "export", "argos", args.run, "--out", str(package), *tag], check=True)
    meta = package_metadata(package)
    pair = (meta["from_code"], meta["to_code"])

    env = argos_env(work)
    if args.argos_threads is not None:
        env["ARGOS_INTRA_THREADS"] = str(args.argos_threads)
    install = "import sys, argostranslate.package as p; p.install_from_path(sys.argv[1])"
    subprocess.run([venv_python(args.venv), "-c", install, str(package)], env=env, check=True, timeout=300)
    installed = sorted(p.name for p in (work / "argos" / "packages").iterdir())
    print("installed into the temporary Argos packages folder:", installed, flush=True)

    proc, url, log_path, languages, started = start_server(args.venv, work, env, pair, args.start_timeout)
    try:
        listed = any(lang["code"] == pair[0] and pair[1] in lang.get("targets", []) for lang in languages)
        body = {"source": pair[0], "target": pair[1], "format": "text"}
        t0 = time.perf_counter()
        # loads the model (the last line: Argos keeps the previous text's translation, and the first comes first)
        http(url + "/translate", {**body, "q": lines[-1]}, timeout=args.request_timeout)
        first = time.perf_counter() - t0
        theirs: list[str] = []
        t0 = time.perf_counter()
        for i in range(0, len(lines), args.batch):
            answer = http(url + "/translate", {**body, "q": lines[i : i + args.batch]}, timeout=args.request_timeout)
            theirs.extend(answer["translatedText"])
        served = time.perf_counter() - t0
    finally:
        stop_server(proc)
    log = log_path.read_text()

    ours_command = [
        *TRANSDUCE, "translate", args.run, "--engine", "ctranslate2", "--beam", str(ARGOS_BEAM),
        "--alpha", str(ARGOS_LENGTH_PENALTY), "--length-penalty", "length", "--input", str(src_file), "--quiet", *tag,
    ]  # fmt: skip
    t0 = time.perf_counter()
    done = subprocess.run(ours_command, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"transduce translate failed ({done.returncode}):\n{done.stderr[-3000:]}")
    ours = done.stdout.split("\n")[: len(lines)]
    ours_seconds = time.perf_counter() - t0

    argos_view = [out.replace("_", " ") for out in ours]  # what Argos's decode makes of our text
    expected = post_edit(args.venv, env, list(zip(lines, argos_view)))
    # Where our search ends at once, Argos (at least one token) gives our best non-empty hypothesis of the beam.
    empty = [i for i, (mine, lt) in enumerate(zip(ours, theirs)) if mine == "" and lt != expected[i]]
    if empty:
        (work / "empty.txt").write_text("".join(lines[i] + "\n" for i in empty), encoding="utf-8")
        nbest_command = [*ours_command, "--nbest", str(ARGOS_BEAM)]
        nbest_command[nbest_command.index(str(src_file))] = str(work / "empty.txt")
        rows = subprocess.run(nbest_command, capture_output=True, text=True, check=True).stdout.splitlines()
        best: dict[int, str] = {}
        for row in rows:
            index, _, text = row.split("\t", 2)
            if text and int(index) not in best:
                best[int(index)] = text.replace("_", " ")
        edited = post_edit(args.venv, env, [(lines[i], best.get(k, "")) for k, i in enumerate(empty)])
        nonempty = {i: edited[k] for k, i in enumerate(empty)}
    same = sum(a == b for a, b in zip(ours, theirs))
    same_post = sum(a == b for a, b in zip(expected, theirs))
    reasons: dict[str, int] = {}
    unexplained = 0
    print(f"\npair {pair[0]}->{pair[1]} listed in /languages: {'yes' if listed else 'no'}")
    total = len(lines)
    print(f"lines identical: {same}/{total}; identical to ours after LibreTranslate's post-edit: {same_post}/{total}")
    for i, (src, mine, lt, exp) in enumerate(zip(lines, ours, theirs, expected)):
        if mine == lt:
            continue
        if exp == lt:
            reason = "'_' read as a space" if argos_view[i] == lt else "LibreTranslate's post-edit"
        elif mine == "" and nonempty[i] == lt:
            reason = "ours empty: Argos decodes at least one token, our best non-empty hypothesis"
        else:
            reason = "unexplained"
            unexplained += 1
        reasons[reason] = reasons.get(reason, 0) + 1
        print(f"  line {i + 1} ({reason})")
        print(f"    source:         {src}\n    transduce:      {mine}\n    LibreTranslate: {lt}")
    refused = log.count("lt-offline: refused")
    print(f"non-loopback lookups/connections refused inside LibreTranslate: {refused}")
    summary = {
        "run": str(args.run),
        "pair": f"{pair[0]}-{pair[1]}",
        "pair_listed": listed,
        "lines": len(lines),
        "identical": same,
        "identical_after_post_edit": same_post,
        "differences": reasons,
        "unexplained": unexplained,
        "libretranslate_start_s": round(started, 1),
        "libretranslate_first_request_s": round(first, 2),
        "libretranslate_translate_s": round(served, 2),
        "libretranslate_lines_per_s": round(len(lines) / served, 1),
        "transduce_command_s": round(ours_seconds, 2),
        "batch": args.batch,
        "argos_intra_threads": args.argos_threads,
        "refused_outside_connections": refused,
        "offline_note_in_log": "Cannot update models (normal if you're offline)" in log,
        "tracebacks_in_log": log.count("Traceback"),
        "versions": versions,
    }
    print(json.dumps(summary))
    return 0 if listed and unexplained == 0 else 1


if __name__ == "__main__":
    sys.exit(main())

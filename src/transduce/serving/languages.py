"""Languages for the LibreTranslate routes (libretranslate.py): the English name of a language code (LibreTranslate's
`/languages` lists `{"code", "name", "targets"}`), and which of the served languages a text is in (`/detect`, and
`/translate` with `source: "auto"`).

The identifier is py3langid (a maintained fork of langid.py: a naive Bayes model over byte n-grams, 140 languages).
Chosen because its model ships inside the wheel (4.6 MB; nothing is downloaded, so it works offline), it is read
with numpy's `allow_pickle=False` (the project's rule is never to unpickle what a user hands over; a package's own
model is not user input, but a format that cannot run code is better still), it can be restricted to a set of
languages (`set_languages`), and it needs only numpy. Passed over: lingua (accurate, but a 96 MB wheel), langdetect
(unmaintained since 2021; also random unless seeded), langid.py (its model is a pickle), fastText's identifier (its
model is a download).

What it answers, as LibreTranslate means it: the language is chosen among the served source languages only (the
identifier restricted to them: a server of English and German never answers French), and the confidence is the
percentage the whole model gives that language among all 140, so German text sent to an English-only server is
"en" with a confidence near 0, not 100. A served code the model does not know (a made-up tag) can only be chosen
when it is the only candidate, with confidence 0. The model is loaded once per process, on first use (about 1 s,
100 MB), and runs off the event loop.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

# ISO 639-1 codes and English names of the languages translation servers commonly offer (LibreTranslate's own list
# and more); another code is its own name.
_NAMES = """
af Afrikaans|am Amharic|ar Arabic|az Azerbaijani|be Belarusian|bg Bulgarian|bn Bengali|bs Bosnian|ca Catalan
cs Czech|cy Welsh|da Danish|de German|el Greek|en English|eo Esperanto|es Spanish|et Estonian|eu Basque|fa Persian
fi Finnish|fr French|ga Irish|gl Galician|gu Gujarati|he Hebrew|hi Hindi|hr Croatian|hu Hungarian|hy Armenian
id Indonesian|is Icelandic|it Italian|ja Japanese|ka Georgian|kk Kazakh|km Khmer|kn Kannada|ko Korean|ky Kyrgyz
la Latin|lt Lithuanian|lv Latvian|mk Macedonian|ml Malayalam|mn Mongolian|mr Marathi|ms Malay|mt Maltese|my Burmese
nb Norwegian Bokmål|ne Nepali|nl Dutch|nn Norwegian Nynorsk|no Norwegian|pa Punjabi|pl Polish|ps Pashto
pt Portuguese|ro Romanian|ru Russian|si Sinhala|sk Slovak|sl Slovenian|sq Albanian|sr Serbian|sv Swedish
sw Swahili|ta Tamil|te Telugu|th Thai|tl Tagalog|tr Turkish|uk Ukrainian|ur Urdu|uz Uzbek|vi Vietnamese|zh Chinese
zt Chinese (traditional)|pb Portuguese (Brazil)
"""
NAMES = dict(entry.split(" ", 1) for entry in _NAMES.replace("\n", "|").split("|") if entry)


def language_name(code: str) -> str:
    """The English name of a language code (`de` -> German; `pt-BR` -> Portuguese); the code itself if unknown."""
    return NAMES.get(code) or NAMES.get(_base(code)) or code


def _base(code: str) -> str:
    """The code's language subtag, lower-cased (`pt-BR`, `zh_Hans` -> `pt`, `zh`): what the identifier knows."""
    return code.replace("_", "-").split("-")[0].lower()


@dataclass(frozen=True)
class Detected:
    language: str  # a served code, as the server was given it
    confidence: float  # percent, 0 to 100

    def shown(self) -> dict[str, Any]:
        """LibreTranslate's shape."""
        return {"confidence": self.confidence, "language": self.language}


class LanguageIdentifier:
    """Which of `languages` (served codes) a text is in, best first."""

    def __init__(self, languages: Sequence[str]) -> None:
        if not languages:
            raise ValueError("a language identifier needs at least one language")
        self.languages = tuple(dict.fromkeys(languages))

    def rank(self, text: str, most: int = 3) -> list[Detected]:
        """The `most` likeliest served languages of `text`, best first (CPU work: call it off the event loop)."""
        full, restricted, known = _models(self.languages)
        if not known:  # nothing the model can tell apart
            return [Detected(code, 0.0) for code in self.languages[:most]]
        whole = dict(full.rank(text))  # the model's probabilities over all its languages
        order = [code for code, _ in restricted.rank(text)] if restricted is not None else list(known)
        ranked = [Detected(known[base], round(100.0 * whole[base], 2)) for base in order]
        unknown = [Detected(code, 0.0) for code in self.languages if _base(code) not in known]
        return (ranked + unknown)[:most]

    def best(self, text: str) -> Detected:
        return self.rank(text, most=1)[0]


_LOCK = threading.Lock()
_FULL: Any = None  # the whole model, loaded once per process
_RESTRICTED: dict[tuple[str, ...], Any] = {}  # per set of served languages, the model restricted to them


def _models(languages: tuple[str, ...]) -> tuple[Any, Any, dict[str, str]]:
    """(the whole model, the model restricted to the served languages it knows or None when there is at most one,
    {the model's code: the served code}) for these languages."""
    global _FULL
    with _LOCK:  # two first requests at once load the model once
        if _FULL is None:
            _FULL = _load()
        known: dict[str, str] = {}
        for code in languages:
            if _base(code) in _FULL.labels:
                known.setdefault(_base(code), code)
        restricted = None
        if len(known) > 1:
            key = tuple(sorted(known))
            if key not in _RESTRICTED:
                _RESTRICTED[key] = _load(_FULL)
                _RESTRICTED[key].set_languages(list(key))
            restricted = _RESTRICTED[key]
        return _FULL, restricted, known


def _load(like: Any = None) -> Any:
    """py3langid's own model with probabilities (norm_probs); `like`: a second identifier sharing its arrays."""
    try:
        from py3langid.langid import MODEL_FILE
        from py3langid.langid import LanguageIdentifier as Model
    except ImportError as err:
        raise ImportError("language detection needs py3langid: pip install 'transduce[serve]'", name=err.name) from None
    if like is None:
        return Model.from_model_file(MODEL_FILE, norm_probs=True)
    # the arrays of the loaded (unrestricted) model, shared, not loaded again
    arrays = (like.nb_ptc, like.nb_pc, like.nb_classes, like.tk_nextmove, like.tk_output)
    return Model(*arrays, norm_probs=True, tk_row=like.tk_row)

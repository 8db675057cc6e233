"""Subtitle files (SRT and WebVTT) translated cue by cue, everything but the cues' text kept byte for byte.

The libraries parse and validate (`srt`, `webvtt-py`: the optional extra `documents`); this module then finds each
cue's text lines in the original text and replaces only those lines. Writing the file back through the libraries
would not keep the bytes: srt.compose turns `00:00:01,5` into `00:00:01,005` and webvtt-py rebuilds the header,
the timing lines and the blocks. So cue numbers, timings, cue settings, identifiers, the WEBVTT header, NOTE, STYLE
and REGION blocks, line endings (CRLF, LF or CR) and a byte-order mark come out as they went in.

A cue's text is one paragraph for the translator: its lines joined by spaces, with no markup. Markup around the
whole cue (`<i>...</i>`, the same tag around every line, a VTT voice `<v Name>`, an SRT position `{\\an8}`, a
dialogue dash) is kept around the translation; tags inside the text are dropped and counted. The translation is
re-wrapped into as many lines as the cue had, balanced by characters and broken only at spaces. A cue whose lines
each start with a dialogue dash (or, in VTT, a voice) holds several speakers: each line is then its own paragraph.
"""

from __future__ import annotations

import bisect
import html
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from ..data import DataError

KINDS = ("srt", "vtt")

_EOL = re.compile(r"\r\n|\r|\n")
# SRT has no markup standard: players read these HTML-like tags and ASS override blocks such as {\an8} or {\i1}.
_SRT_TAG = re.compile(r"</?(?:i|b|u|s|font)(?:\s[^<>]*)?>|\{\\[^{}]*\}", re.IGNORECASE)
# In a WebVTT cue every `<` opens a tag (a literal one is written &lt;), timestamps `<00:00:01.000>` included.
_VTT_TAG = re.compile(r"<[^<>]*>")
# the markup kept around a cue never holds a line break, so the cue's lines stay where they were
_OPEN_TAG = re.compile(r"<([A-Za-z]+)(?:[. \t][^<>\n]*)?>")
_VOICE = re.compile(r"<v(?:\.[^\s<>]*)?(?:[ \t][^<>\n]*)?>")
_SRT_POSITION = re.compile(r"(?:\{\\[^{}\n]*\})+")
_DASH = re.compile(r"-(?!\d)\s*")  # a dialogue dash, not the sign of "-10"
_LEADING_TAGS = re.compile(r"(?:<[^<>]*>|\{\\[^{}]*\})*")
_TIMING_LIKE = re.compile(r"-->|^\s*\d+:\d\d:\d\d[,.]\d")


@dataclass
class _Segment:
    """The text lines (indices into the file's lines) that become one paragraph, and the markup kept around it."""

    slots: list[int]
    head: str = ""  # before the first line: voice, position, whole-cue opening tags, a dialogue dash
    tail: str = ""  # after the last line: the closing tags
    line_open: str = ""  # around every line, where the source wrapped each line in the same tag
    line_close: str = ""
    text: str = ""  # the paragraph the translator sees
    dropped: int = 0  # inline tags removed from the text


@dataclass
class _File:
    """A subtitle file cut into lines, each a (text, line ending) pair; the BOM, if any, is held apart."""

    bom: str
    body: str
    lines: list[tuple[str, str]] = field(default_factory=list)
    starts: list[int] = field(default_factory=list)  # offset of each line in the text without the BOM

    @classmethod
    def read(cls, text: str) -> _File:
        bom = "\ufeff" if text.startswith("\ufeff") else ""
        body = text[len(bom) :]
        file = cls(bom, body)
        offset = 0
        for end in _EOL.finditer(body):
            file.lines.append((body[offset : end.start()], end.group()))
            file.starts.append(offset)
            offset = end.end()
        if offset < len(body):
            file.lines.append((body[offset:], ""))
            file.starts.append(offset)
        return file

    def line_at(self, offset: int) -> int:
        """The index of the line holding character `offset` of the text without the BOM."""
        return max(bisect.bisect_right(self.starts, offset) - 1, 0)

    def texts(self, slots: list[int]) -> list[str]:
        return [self.lines[i][0] for i in slots]


def translate_subtitles(
    text: str, kind: str, translate: Callable[[list[str]], list[str]], *, name: str = "<input>"
) -> str:
    """kind "srt" or "vtt"; returns the translated file's text."""
    return translate_subtitles_counted(text, kind, translate, name=name)[0]


def translate_subtitles_counted(
    text: str, kind: str, translate: Callable[[list[str]], list[str]], *, name: str = "<input>"
) -> tuple[str, int]:
    """As translate_subtitles, and the number of inline tags dropped from the cues' text (an opening tag with its
    closing tag counts once; a VTT timestamp tag counts once). `translate` is called once (not at all when no cue
    has text), with every cue's paragraph in file order, and returns one translation per paragraph. Bad input
    raises DataError naming `name` and the line."""
    if kind not in KINDS:
        raise ValueError(f"subtitle kind must be one of {KINDS}, not {kind!r}")
    file = _File.read(text)
    cues = _srt_cues(file, name) if kind == "srt" else _vtt_cues(file, name)
    segments = [segment for cue in cues for segment in _segments(file, cue, kind)]
    to_send = [segment for segment in segments if segment.text]
    translations = translate([segment.text for segment in to_send]) if to_send else []
    if len(translations) != len(to_send):
        raise ValueError(f"the translator returned {len(translations)} translations for {len(to_send)} paragraphs")
    replaced: dict[int, list[tuple[str, str]]] = {}
    dropped = 0
    for segment, translation in zip(to_send, translations):
        if translation.strip():  # an empty line would end the cue: a cue with no translation stays as it was
            replaced |= _rewrite(file, segment, translation, kind)
            dropped += segment.dropped
    out = [file.bom]
    for i, line in enumerate(file.lines):
        out.extend(part for new in replaced.get(i, [line]) for part in new)
    return "".join(out), dropped


# Finding the cues' text lines -----------------------------------------------------------------------------------
def _srt_cues(file: _File, name: str) -> list[list[int]]:
    """The indices of each cue's text lines, after srt has parsed and validated the file."""
    import srt

    try:
        subtitles = list(srt.parse(file.body))
    except srt.SRTParseError as err:
        # srt names the first character it could not read; the broken timing line, if any, is the useful one
        first = file.line_at(err.expected_start)
        last = file.line_at(max(err.actual_start - 1, err.expected_start))
        unread = range(first, last + 1)
        line = next((i for i in unread if _TIMING_LIKE.search(file.lines[i][0])), None)
        line = line if line is not None else next((i for i in unread if file.lines[i][0].strip()), first)
        raise DataError(f"{name}:{line + 1}: not an SRT cue (a number, a timing line `start --> end`, text)") from None
    except ValueError as err:  # srt.TimestampParseError
        raise DataError(f"{name}: cannot read an SRT timing ({err})") from None
    # srt.parse finds the cues with SRT_REGEX; the same matches, in the same order, give where each cue's text is
    cues = []
    for subtitle, match in zip(subtitles, srt.SRT_REGEX.finditer(file.body)):
        timing = file.line_at(match.start(2))
        after_end = file.body[match.end(3) : match.end(3) + 1]
        if match.group(4) and not after_end.isspace():
            # srt reads `00:00:0x,000` as the time 00:00:0 followed by settings "x,000": a broken end time
            raise DataError(f"{name}:{timing + 1}: cannot read the end time of the timing line")
        if subtitle.end < subtitle.start:
            raise DataError(f"{name}:{timing + 1}: the cue ends before it starts")
        start, end = match.span(5)
        lines = [i for i in range(file.line_at(start), file.line_at(end) + 1) if start <= file.starts[i] < end]
        for i in lines:
            # srt lets a cue's text run on over blank lines, so a cue whose timing it cannot read is taken as text
            if _TIMING_LIKE.search(file.lines[i][0]):
                raise DataError(f"{name}:{i + 1}: cannot read this timing line")
        cues.append(lines)
    return cues


def _vtt_blocks(file: _File) -> list[list[int]]:
    """The line indices of each block, cut as webvtt-py cuts them: at empty lines, and before a line with "-->"
    that cannot be the timing line of the block so far (the header's, or one after two lines or a timing line)."""
    blocks: list[list[int]] = []
    block: list[int] = []
    for i, (text, _) in enumerate(file.lines):
        arrow_starts_block = bool(block) and "-->" in text
        if arrow_starts_block and blocks and len(block) == 1 and "-->" not in file.lines[block[0]][0]:
            arrow_starts_block = False  # an identifier line, then this timing line
        if not text or arrow_starts_block:
            if block:
                blocks.append(block)
            block = []
        if text:
            block.append(i)
    if block:
        blocks.append(block)
    return blocks


def _vtt_cues(file: _File, name: str) -> list[list[int]]:
    """The indices of each cue's text lines, after webvtt-py has parsed and validated the file."""
    import webvtt
    from webvtt.errors import MalformedCaptionError, MalformedFileError

    try:
        captions = list(webvtt.WebVTT.from_string(file.body).captions)
    except MalformedFileError:
        raise DataError(f"{name}:1: not a WebVTT file: the first line must start with WEBVTT") from None
    except (MalformedCaptionError, ValueError) as err:
        raise DataError(f"{name}: not a valid WebVTT file ({err})") from None
    # webvtt-py skips a cue it cannot read; each block with a timing line must be the next caption it read
    cues = []
    pending = iter(captions)
    for block in _vtt_blocks(file)[1:]:
        texts = file.texts(block)
        arrow = next((k for k, text in enumerate(texts) if "-->" in text), None)
        if arrow is None or (arrow == 0 and texts[0].startswith("NOTE")):
            continue  # a comment, a style, a region, or text webvtt-py ignores as WebVTT parsers do
        identifier = texts[0] if arrow == 1 else None
        caption = next(pending, None)
        if caption is None or (caption.identifier or None, list(caption.lines)) != (identifier, texts[arrow + 1 :]):
            raise DataError(f"{name}:{block[arrow] + 1}: cannot read this cue timing line")
        if _vtt_milliseconds(caption.end) < _vtt_milliseconds(caption.start):
            raise DataError(f"{name}:{block[arrow] + 1}: the cue ends before it starts")
        cues.append(block[arrow + 1 :])
    return cues


def _vtt_milliseconds(timestamp: str) -> int:
    """Milliseconds of webvtt-py's `[hh:]mm:ss.ttt`."""
    clock, _, fraction = timestamp.partition(".")
    seconds = 0
    for part in clock.split(":"):
        seconds = seconds * 60 + int(part)
    return seconds * 1000 + int(fraction.ljust(3, "0")[:3] or 0)


# Markup -----------------------------------------------------------------------------------------------------------
def _segments(file: _File, slots: list[int], kind: str) -> list[_Segment]:
    """A cue's text lines as paragraphs: one, or one per line for a dialogue of several speakers."""
    slots = [i for i in slots if file.lines[i][0].strip()]  # srt lets blank lines into a cue; they stay
    texts = file.texts(slots)
    if len(texts) > 1 and kind == "vtt" and all(_VOICE.match(text) for text in texts):
        return [_markup([text], [i], kind) for i, text in zip(slots, texts)]  # a voice a line: each its own
    if not texts:
        return []
    # markup around the whole cue first, so `<i>- Hi.\n- Hello.</i>` is seen as the dialogue it is
    head, text, tail = _outer("\n".join(texts), kind)
    lines = text.split("\n")  # as many as `slots`: the outer markup holds no line break
    if len(lines) > 1 and all(_LEADING_TAGS.sub("", line, count=1).startswith("-") for line in lines):
        segments = [_markup([line], [i], kind) for i, line in zip(slots, lines)]
    else:
        segments = [_markup(lines, slots, kind)]
    segments[0].head = head + segments[0].head
    segments[-1].tail += tail
    return segments


def _outer(text: str, kind: str) -> tuple[str, str, str]:
    """(head, inner text, tail): the voice or position at the start and the elements around the whole text."""
    head = tail = ""
    while True:
        start = (_VOICE if kind == "vtt" else _SRT_POSITION).match(text)
        if start and not head.startswith("<v"):
            head, text = head + start.group(), text[start.end() :]
            if kind == "vtt" and text.endswith("</v>"):  # a voice's closing tag is optional
                text, tail = text[: -len("</v>")], "</v>" + tail
        elif wrapped := _unwrap(text, kind):
            head, text, tail = head + wrapped[0], wrapped[1], wrapped[2] + tail
        else:
            return head, text, tail


def _markup(lines: list[str], slots: list[int], kind: str) -> _Segment:
    """The markup kept around a group of lines, and the plain paragraph within."""
    segment = _Segment(slots)
    segment.head, text, segment.tail = _outer("\n".join(lines), kind)
    lines = text.split("\n")
    per_line = [_unwrap(line, kind) for line in lines] if len(lines) > 1 else []
    first = per_line[0] if per_line else None
    if first and all(w and (w[0], w[2]) == (first[0], first[2]) for w in per_line):
        segment.line_open, segment.line_close = first[0], first[2]
        text = "\n".join(w[1] for w in per_line if w)
    dash = _DASH.match(text)
    if dash:
        segment.head += dash.group()
        text = text[dash.end() :]
    tags = _VTT_TAG if kind == "vtt" else _SRT_TAG
    segment.dropped = sum(1 for tag in tags.findall(text) if not tag.startswith("</"))
    text = tags.sub("", text)  # tags sit at word boundaries, or inside a word (karaoke syllables)
    if kind == "vtt":
        text = html.unescape(text)  # &amp; &lt; &gt; &nbsp; &lrm;: the translator reads characters
    segment.text = " ".join(text.split())
    return segment


def _unwrap(text: str, kind: str) -> tuple[str, str, str] | None:
    """(opening tag, inner text, closing tag) when one element spans the whole of `text`, else None."""
    opening = _OPEN_TAG.match(text)
    if not opening or opening.group(1).lower() == "v":
        return None
    tag = opening.group(1).lower()
    if kind == "srt" and tag not in ("i", "b", "u", "s", "font"):
        return None
    closing = f"</{tag}>"
    if not text.lower().endswith(closing):
        return None
    inner = text[opening.end() : len(text) - len(closing)]
    depth = 0  # `<i>a</i> b <i>c</i>` starts and ends with the tag, but the first element closes early
    for match in re.finditer(rf"<(/?){tag}(?:[.\s][^<>]*)?>", inner, re.IGNORECASE):
        depth += -1 if match.group(1) else 1
        if depth < 0:
            return None
    return opening.group(), inner, text[len(text) - len(closing) :]


# Writing back ---------------------------------------------------------------------------------------------------
def _rewrite(file: _File, segment: _Segment, translation: str, kind: str) -> dict[int, list[tuple[str, str]]]:
    """The new (text, line ending) pairs for each of the segment's lines; lines the translation does not fill
    are removed (an empty line would end the cue), and the last line keeps its ending."""
    lines = _wrap(translation, len(segment.slots))
    if kind == "vtt":
        lines = [html.escape(line, quote=False) for line in lines]  # `<`, `&` and `-->` cannot stand in a cue
    lines = [segment.line_open + line + segment.line_close for line in lines]
    lines[0] = segment.head + lines[0]
    lines[-1] = lines[-1] + segment.tail
    endings = [file.lines[i][1] for i in segment.slots]
    new: dict[int, list[tuple[str, str]]] = {i: [] for i in segment.slots}
    for k, line in enumerate(lines):
        new[segment.slots[k]] = [(line, endings[-1] if k == len(lines) - 1 else endings[k])]
    return new


def _wrap(text: str, n_lines: int) -> list[str]:
    """`text` in at most `n_lines` lines, broken only at spaces, with lengths as even as can be (the least sum of
    squared lengths; on a tie the upper line is the shorter, as subtitlers' bottom-heavy pyramids have it)."""
    words = text.split()
    n_lines = max(1, min(n_lines, len(words)))
    if n_lines == 1:
        return [" ".join(words)]
    ends = [0]
    for word in words:
        ends.append(ends[-1] + len(word))

    def cost(i: int, j: int) -> int:  # words[i:j] on one line, with the spaces between them
        return (ends[j] - ends[i] + j - i - 1) ** 2

    # best[k][j]: (cost, break) of words[:j] in k lines; the last of those lines starts at word `break`
    best: list[dict[int, tuple[int, int]]] = [{0: (0, 0)}]
    for k in range(1, n_lines + 1):
        row = {}
        for j in range(k, len(words) - (n_lines - k) + 1):
            row[j] = min((best[k - 1][i][0] + cost(i, j), i) for i in best[k - 1] if i < j)
        best.append(row)
    breaks = [len(words)]
    for k in range(n_lines, 0, -1):
        breaks.append(best[k][breaks[-1]][1])
    breaks.reverse()
    return [" ".join(words[a:b]) for a, b in zip(breaks, breaks[1:])]

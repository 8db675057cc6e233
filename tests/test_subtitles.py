"""Subtitles (documents/subtitles.py) and the format of a file from its name (documents/formats.py), with a fake
translator that upper-cases: everything but the cues' text must come back byte for byte."""

from __future__ import annotations

import pytest

from transduce.data import DataError
from transduce.documents.formats import FORMATS, detect_format
from transduce.documents.subtitles import translate_subtitles, translate_subtitles_counted


class Upper:
    """A fake translator: upper-cases each paragraph and records every call."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def __call__(self, paragraphs: list[str]) -> list[str]:
        self.calls.append(list(paragraphs))
        return [p.upper() for p in paragraphs]


def _lines_that_differ(source: str, out: str, eol: str) -> list[int]:
    src, got = source.split(eol), out.split(eol)
    assert len(src) == len(got)
    return [i for i, (a, b) in enumerate(zip(src, got)) if a != b]


# An SRT file as editors leave them: BOM, CRLF, a timing srt.compose would rewrite (`00:00:01,5` -> `,005`),
# trailing coordinates, an empty cue, a position override, italics around each line.
SRT = (
    "\ufeff1\r\n"
    "00:00:01,5 --> 00:00:03,000 X1:100 X2:200\r\n"
    "<i>Where are you going\r\n"
    "so late at night?</i>\r\n"
    "\r\n"
    "2\r\n"
    "00:00:04,000 --> 00:00:05,000\r\n"
    "\r\n"
    "3\r\n"
    "00:00:06,000 --> 00:00:08,250\r\n"
    "{\\an8}I <b>really</b> don't know.\r\n"
    "\r\n"
    "4\r\n"
    "00:00:09,000 --> 00:00:10,000\r\n"
    "<i>Out to the river,</i>\r\n"
    "<i>then home again.</i>\r\n"
)
SRT_TEXT_LINES = [2, 3, 10, 14, 15]  # indices of the lines holding cue text


def test_srt_keeps_every_line_but_the_text_byte_for_byte():
    out = translate_subtitles(SRT, "srt", Upper(), name="film.srt")
    assert out.startswith("\ufeff1\r\n")
    assert "\n" not in out.replace("\r\n", "")  # CRLF everywhere, no bare LF
    assert _lines_that_differ(SRT, out, "\r\n") == SRT_TEXT_LINES


def test_srt_cue_text_rewrapped_with_its_markup_kept():
    out, dropped = translate_subtitles_counted(SRT, "srt", Upper())
    lines = out.split("\r\n")
    assert lines[2:4] == ["<i>WHERE ARE YOU GOING", "SO LATE AT NIGHT?</i>"]  # whole-cue italics, two lines
    assert lines[10] == "{\\an8}I REALLY DON'T KNOW."  # position kept as a prefix, inner <b> dropped
    assert lines[14:16] == ["<i>OUT TO THE RIVER,</i>", "<i>THEN HOME AGAIN.</i>"]  # italics on every line
    assert dropped == 1


def test_translate_called_once_with_each_cue_as_one_paragraph_and_no_markup():
    fake = Upper()
    translate_subtitles(SRT, "srt", fake)
    assert fake.calls == [
        ["Where are you going so late at night?", "I really don't know.", "Out to the river, then home again."]
    ]


def test_empty_cue_stays_empty_and_is_not_sent():
    fake = Upper()
    out = translate_subtitles(SRT, "srt", fake)
    assert out.split("\r\n")[5:9] == ["2", "00:00:04,000 --> 00:00:05,000", "", "3"]
    assert fake.calls and all(p.strip() for p in fake.calls[0])
    silent = "1\n00:00:01,000 --> 00:00:02,000\n\n2\n00:00:03,000 --> 00:00:04,000\n<i></i>\n"
    untouched = Upper()
    assert translate_subtitles(silent, "srt", untouched) == silent
    assert untouched.calls == []


def test_translation_rewrapped_into_the_source_line_count_balanced_at_spaces():
    source = "1\n00:00:01,000 --> 00:00:02,000\nshort\ntext\n"
    longer = translate_subtitles(source, "srt", lambda ps: ["the quick brown fox jumps over it"])
    assert longer.split("\n")[2:] == ["the quick brown", "fox jumps over it", ""]
    one = "1\n00:00:01,000 --> 00:00:02,000\nshort text\n"
    assert translate_subtitles(one, "srt", lambda ps: ["the quick brown fox jumps over it"]).count("\n") == 3
    # fewer words than lines: fewer lines, never an empty one (which would end the cue)
    single = translate_subtitles(source, "srt", lambda ps: ["Ja."])
    assert single == "1\n00:00:01,000 --> 00:00:02,000\nJa.\n"


def test_dialogue_lines_are_translated_one_by_one_with_their_dashes():
    source = "1\n00:00:01,000 --> 00:00:02,000\n- Are you coming?\n-No.\n"
    fake = Upper()
    out = translate_subtitles(source, "srt", fake)
    assert fake.calls == [["Are you coming?", "No."]]
    assert out.split("\n")[2:4] == ["- ARE YOU COMING?", "-NO."]
    italic = "1\n00:00:01,000 --> 00:00:02,000\n<i>- Are you coming?\n- No.</i>\n"
    out, dropped = translate_subtitles_counted(italic, "srt", fake)
    assert fake.calls[-1] == ["Are you coming?", "No."]
    assert out.split("\n")[2:4] == ["<i>- ARE YOU COMING?", "- NO.</i>"]
    assert dropped == 0


def test_lf_file_stays_lf_and_unterminated_last_line_stays_so():
    source = "1\n00:00:01,000 --> 00:00:02,000\nhello there"
    assert translate_subtitles(source, "srt", Upper()) == "1\n00:00:01,000 --> 00:00:02,000\nHELLO THERE"


VTT = (
    "WEBVTT - The river\n"
    "Kind: captions\n"
    "\n"
    "REGION\n"
    "id:top width:40% lines:3\n"
    "\n"
    "STYLE\n"
    "::cue(.yellow) { color: yellow }\n"
    "\n"
    "NOTE translated by hand\n"
    "\n"
    "intro\n"
    "00:00:01.000 --> 00:00:04.000 align:start position:10% region:top\n"
    "<v.loud Anna>Fish &amp; chips <00:00:02.000>on the\n"
    "<c.yellow>riverbank</c> tonight?</v>\n"
    "\n"
    "00:01.000 --> 00:05.000 line:0\n"
    "<i>All right, all right.</i>\n"
    "\n"
    "00:00:06.000 --> 00:00:07.000\n"
    "\n"
    "00:00:08.000 --> 00:00:09.000\n"
    "<v Anna>Now?\n"
    "<v Ben>Now.\n"
)
VTT_TEXT_LINES = [13, 14, 17, 22, 23]


def test_vtt_keeps_header_blocks_identifiers_and_settings_byte_for_byte():
    out = translate_subtitles(VTT, "vtt", Upper(), name="film.vtt")
    assert _lines_that_differ(VTT, out, "\n") == VTT_TEXT_LINES
    assert "00:00:01.000 --> 00:00:04.000 align:start position:10% region:top\n" in out


def test_vtt_voice_and_whole_cue_tags_kept_inline_tags_dropped_entities_decoded():
    fake = Upper()
    out, dropped = translate_subtitles_counted(VTT, "vtt", fake)
    assert fake.calls == [["Fish & chips on the riverbank tonight?", "All right, all right.", "Now?", "Now."]]
    lines = out.split("\n")
    assert lines[13:15] == ["<v.loud Anna>FISH &amp; CHIPS ON THE", "RIVERBANK TONIGHT?</v>"]
    assert lines[17] == "<i>ALL RIGHT, ALL RIGHT.</i>"
    assert lines[22:24] == ["<v Anna>NOW?", "<v Ben>NOW."]  # two voices: two paragraphs
    assert dropped == 2  # the timestamp tag and <c.yellow>...</c>


def test_vtt_translation_escaped_and_cr_line_endings_kept():
    source = "WEBVTT\r\r00:00:01.000 --> 00:00:02.000\rsmall print\r"
    out = translate_subtitles(source, "vtt", lambda ps: ["a < b & c --> d"])
    assert out == "WEBVTT\r\r00:00:01.000 --> 00:00:02.000\ra &lt; b &amp; c --&gt; d\r"


@pytest.mark.parametrize(
    ("kind", "text", "line", "what"),
    [
        ("srt", "1\n00:00:01,000 --> 00:00:02,000\nA.\n\n2\n00:00:03,000 --> 00:00:0x,000\nB.\n", 6, "end time"),
        ("srt", "1\n00:00:01,000 --> 00:00:02,000\nA.\n\n2\n00:00:0x,000 --> 00:00:04,000\nB.\n", 6, "SRT cue"),
        ("srt", "1\n00:00:05,000 --> 00:00:02,000\nA.\n", 2, "ends before it starts"),
        ("srt", "just some text\n", 1, "SRT cue"),
        ("vtt", "1\n00:00:01.000 --> 00:00:02.000\nA.\n", 1, "WEBVTT"),
        ("vtt", "WEBVTT\n\n00:00:01.000 --> 00:00:02.000\nA.\n\n00:00:03.000 --> 00:00:0x.000\nB.\n", 6, "timing"),
        ("vtt", "WEBVTT\n\nid\n00:00:05.000 --> 00:00:02.000\nA.\n", 4, "ends before it starts"),
    ],
)
def test_bad_input_is_a_data_error_naming_the_file_and_line(kind, text, line, what):
    fake = Upper()
    with pytest.raises(DataError, match=rf"^sub\.{kind}:{line}: .*{what}") as caught:
        translate_subtitles(text, kind, fake, name=f"sub.{kind}")
    assert "\n" not in str(caught.value)
    assert fake.calls == []


def test_translator_returning_the_wrong_count_and_unknown_kind_are_refused():
    with pytest.raises(ValueError, match="2 translations for 3"):
        translate_subtitles(SRT, "srt", lambda ps: ps[:2])
    with pytest.raises(ValueError, match="ass"):
        translate_subtitles(SRT, "ass", Upper())


@pytest.mark.parametrize(
    ("path", "kind"),
    [
        ("film.srt", "srt"),
        ("dir.d/Film.VTT", "vtt"),
        ("page.html", "html"),
        ("page.htm", "html"),
        ("page.xhtml", "html"),
        ("data.xml", "xml"),
        ("notes.txt", "text"),
        ("srt", "text"),
        (None, "text"),
    ],
)
def test_detect_format(path, kind):
    assert detect_format(path) == kind
    assert kind in FORMATS

"""agentlab.core.text.printable: third-party text shown in a report loses its escape sequences whole and shows
every other control character."""

from __future__ import annotations

import json

import pytest

from agentlab.core.text import printable


@pytest.mark.parametrize(("raw", "shown"), [
    ("\x1b[31mError\x1b[0m: boom", "Error: boom"),                       # colour (CSI ... m)
    ("\x1b[2J\x1b[Hcleared", "cleared"),                                  # clear screen, cursor home
    ("\x1b]0;owned\x07title", "title"),                                   # OSC window title, ended by BEL
    ("\x1b]8;;http://x.test\x1b\\click\x1b]8;;\x1b\\", "click"),          # OSC 8 hyperlink, ended by ST
    ("\x1bPq#0;2;0;0;0\x1b\\after", "after"),                             # DCS string
    ("\x9b31mred", "red"),                                                # 8-bit CSI
    ("\x1b(Bplain\x1b7", "plain"),                                        # charset, save cursor
    ("unterminated \x1b]0;title", "unterminated "),                       # an OSC never ended runs to the end
    ("dangling \x1b", "dangling "),
])
def test_escape_sequences_are_removed_whole(raw, shown):
    assert printable(raw) == shown


def test_other_controls_are_shown_and_text_is_kept():
    assert printable("50%\rdone\x07") == "50%^Mdone^G"
    assert printable("a\u202eb") == "a<U+202E>b"
    assert printable("tab\tand\nnewline ✓ ✗ – café 模型") == "tab\tand\nnewline ✓ ✗ – café 模型"
    assert printable("two\nlines", newlines=False) == "two^Jlines"


def test_a_json_document_passes_a_printable_stream_unchanged_and_reads_back_the_same():
    from agentlab.core.text import json_text
    doc = {"stderr": "x\x1b[2J\x9b31m\u202eevil\x7f café 模型", "n": 1}
    line = json_text(doc)
    assert printable(line) == line and "\n" not in line
    assert json.loads(line) == doc
    assert "café 模型" in line  # readable letters stay letters

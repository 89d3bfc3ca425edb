"""Text written by others (an agent's stderr, an exception's message, a server's error, a hook's output), made
safe to print in a report: escape sequences removed whole, any other control character shown.

A report is read in a terminal, and also in a CI log that a browser renders as one: an ``ESC [ 2 J`` in an
agent's stderr would clear it, an OSC 8 sequence would hide a link behind harmless text, a carriage return
would overwrite the start of the line with what follows. :func:`printable` removes every ECMA-48 escape
sequence (CSI ``ESC [ … final``, OSC / DCS / APC / PM / SOS strings up to their terminator, two-byte ``ESC x``,
and their 8-bit C1 forms), so colour codes vanish instead of littering the line, and then shows each control
character left as :func:`caret` does (``^M``, ``^G``, ``<U+202E>``). Tab and newline
are kept; with ``newlines=False`` a newline is shown as ``^J`` too, for text that must stay on one line.
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = ["ESCAPE_SEQUENCE", "caret", "json_text", "printable"]

# ECMA-48 (ISO 6429): a control string (OSC, DCS, SOS, PM, APC; ESC-introduced or 8-bit) runs to ST (ESC \ or
# U+009C) or, for OSC as xterm accepts it, BEL; a string never terminated runs to the end of the text. A control
# sequence (CSI: ESC [ or U+009B) is parameter bytes 0x30-0x3F, intermediate bytes 0x20-0x2F, one final byte
# 0x40-0x7E. Any other ESC takes its intermediates and one final byte (ESC ( B, ESC 7, ESC c).
ESCAPE_SEQUENCE = re.compile(
    r"(?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])[^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c|$)"
    r"|(?:\x1b\[|\x9b)[\x30-\x3f]*[\x20-\x2f]*[\x40-\x7e]?"
    r"|\x1b[\x20-\x2f]*[\x30-\x7e]?")

# C0 controls but tab and newline, DEL, the C1 controls (U+0080-U+009F: CSI U+009B starts an escape sequence on
# some terminals), and the bidirectional controls that reorder what a line seems to say
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _shown(match: re.Match[str]) -> str:
    code = ord(match.group())
    if code < 0x20:
        return "^" + chr(code + 0x40)
    if code == 0x7F:
        return "^?"
    if code <= 0x9F:
        return "M-^" + chr(code - 0x80 + 0x40)
    return f"<U+{code:04X}>"


def caret(text: str) -> str:
    """``text`` as ``cat -v`` shows it: control characters in caret notation (``^[`` for ESC, ``^M`` for a
    carriage return, ``^?`` for DEL, ``M-^[`` for the C1 controls); tab and newline are kept. Bidirectional
    controls are shown as ``<U+202E>``. Other text, accented letters included, is unchanged."""
    return _CONTROL.sub(_shown, text)


def printable(text: str, *, newlines: bool = True) -> str:
    """``text`` without escape sequences, its other control characters in caret notation (``^M``, ``^?``,
    ``M-^[``) and bidirectional controls as ``<U+202E>``; tab and newline kept (``newlines=False``: a newline
    as ``^J``). Letters of any script, emoji and the report's own marks pass unchanged."""
    text = str(text)
    if _CONTROL.search(text) is None:  # most text: one scan, nothing to change
        return text if newlines or "\n" not in text else text.replace("\n", "^J")
    shown = caret(ESCAPE_SEQUENCE.sub("", text))
    return shown if newlines else shown.replace("\n", "^J")


# what json.dumps(ensure_ascii=False) leaves as it is and printable() would change: DEL, C1, bidirectional controls
_JSON_UNESCAPED = re.compile("[\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def json_text(value: Any) -> str:
    """``value`` as one line of JSON, readable letters kept as they are (``ensure_ascii=False``) but every
    character :func:`printable` would change escaped as ``\\uXXXX``: the same document, lossless, that passes a
    printable-only stream untouched."""
    return _JSON_UNESCAPED.sub(lambda m: f"\\u{ord(m.group()):04x}", json.dumps(value, ensure_ascii=False))

"""The site's language switch: a Sphinx extension that puts, at the top of every page, a link to the same page in
the other language (or, where that language has no such page, to its front page).

The site is two Sphinx builds: the English one at the root and the Chinese one in ``zh/``, page names alike
(``notebooks/03_context_window`` in both). website/build.py copies this file beside each build's conf.py and
writes ``languages.json`` there: this build's language, the other one's, and the other build's page names.
"""

from __future__ import annotations

import html
import json
from pathlib import Path

SETTINGS = "languages.json"
LABELS = {"en": "English", "zh": "中文"}
HREFLANG = {"en": "en", "zh": "zh-CN"}
PREFIX = {"en": "", "zh": "zh/"}          # where each build sits in the site


def other_page_uri(pagename: str, here: str, there: str, pages: set[str]) -> str:
    """The relative address, from page ``pagename`` of the ``here`` build, of the same page in the ``there``
    build, or of that build's front page when it has no page of that name."""
    up = "../" * (pagename.count("/") + PREFIX[here].count("/"))
    target = pagename if pagename in pages else "index"
    return f"{up}{PREFIX[there]}{target}.html"


def switch_html(pagename: str, settings: dict) -> str:
    here, there = settings["language"], settings["other"]
    pages = set(settings["other_pages"])
    uri = other_page_uri(pagename, here, there, pages)
    what = LABELS[there] if pagename in pages else f"{LABELS[there]} ({settings['other_front']})"
    return (f'<p class="agentlab-language" lang="{HREFLANG[here]}">{html.escape(settings["switch_label"])}'
            f'<a class="agentlab-language-link" href="{html.escape(uri)}" hreflang="{HREFLANG[there]}" '
            f'lang="{HREFLANG[there]}">{html.escape(what)}</a></p>\n')


def _page_context(app, pagename, templatename, context, doctree) -> None:  # noqa: ARG001 - Sphinx's signature
    settings = app.agentlab_languages
    if "body" in context:
        context["body"] = switch_html(pagename, settings) + context["body"]
    pages = set(settings["other_pages"])
    if pagename in pages:
        uri = other_page_uri(pagename, settings["language"], settings["other"], pages)
        context["metatags"] = context.get("metatags", "") + (
            f'<link rel="alternate" hreflang="{HREFLANG[settings["other"]]}" href="{html.escape(uri)}">\n')


def _load(app) -> None:
    path = Path(app.srcdir) / SETTINGS
    try:
        settings = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise RuntimeError(f"{path}: the language switch needs this file (website/build.py writes it): {exc}") from exc
    missing = {"language", "other", "other_pages", "switch_label", "other_front"} - set(settings)
    if missing or settings["language"] not in LABELS or settings["other"] not in LABELS:
        raise RuntimeError(f"{path}: expected language and other among {sorted(LABELS)} and the keys "
                           f"{sorted(missing)}, got {settings!r:.200}")
    app.agentlab_languages = settings


def setup(app) -> dict:
    app.connect("builder-inited", _load)
    app.connect("html-page-context", _page_context)
    return {"parallel_read_safe": True, "parallel_write_safe": True}

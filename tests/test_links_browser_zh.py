"""The links of every Chinese lesson and of the Chinese glossary (notebooks/zh/) in JupyterLab in a real browser,
drawn as written and one of each kind clicked, as tests/test_links_browser.py checks the English ones; a file of its
own so that it runs on another worker, in the same JupyterLab (tests/browser_lab.py)."""

from __future__ import annotations

from test_links_browser import check_links, documents, lab  # noqa: F401  (lab: the fixture, the run's one lab)


def test_every_link_of_every_chinese_lesson_opens_in_jupyterlab(lab, capsys):  # noqa: F811
    docs = [d for d in documents(lab["root"]) if d.startswith("zh/")]
    assert "zh/glossary.zh.md" in docs and len(docs) == 16, docs
    check_links(lab, capsys, docs, workspace="links-zh")

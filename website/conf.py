# Sphinx configuration of the lesson website; website/build.py lays out the sources and runs Sphinx.
import os
import sys

project = "agentlab"
author = "agentlab"
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))   # languages.py, copied here by website/build.py
extensions = ["myst_nb", "languages"]                            # languages: the switch to the other language
nb_execution_mode = "off"                 # the lessons' committed outputs, as executed by nbval
nb_merge_streams = True
myst_enable_extensions = ["colon_fence"]
myst_heading_anchors = 3
exclude_patterns = ["_build"]
html_theme = "furo"
html_title = "agentlab: the end of an agent's turn"
html_static_path: list[str] = []
suppress_warnings = ["myst.header", "mystnb.unknown_mime_type"]

"""Errors agentlab raises for bad input. Each message names what is wrong and where.

A failed API call is not one of them: the wire (wire.py) classifies what a call raised or returned into a
``Failure`` (transitions.py), which ``decide()`` reads (retry, compact, end). ``sdk_error_text`` below gives an
SDK error's words for it."""

from __future__ import annotations


class AgentlabError(Exception):
    """Base class: bad input or configuration (the CLI exits with status 2 on these).

    In a notebook it shows as its name and message alone, as the CLI shows it in one line: IPython prints what
    ``_render_traceback_`` returns in place of a traceback, and agentlab's frames say nothing about the name or
    value the learner typed, which the message names. Elsewhere (a script, pytest) the traceback is as usual.
    """

    def _render_traceback_(self) -> list[str]:
        return [f"\x1b[0;31m{type(self).__name__}\x1b[0m: {self}"]  # IPython's colour for an error's name


class ScenarioError(AgentlabError, ValueError):
    """A scenario file is malformed: the message names the file, the step and the field."""


class ConfigError(AgentlabError, ValueError):
    """A loop option or a settings file is invalid."""


def sdk_error_text(exc: BaseException) -> str:
    """An SDK error in words built from its own fields, never from ``str(exc)``, whose wording the SDK changes
    between releases ("Error code: 500 - {...}" up to anthropic 2.16, "500 Internal server error (request_id:
    ..., path: ..., type: ...)" from 2.17). An API status error reads "HTTP 500 api_error: Internal server error
    [request req_...]"; a timeout and a connection error are named by their kind; anything else, and a status
    error whose body says nothing (another library's, litellm's), is its ``str``.
    Read by attribute, so this module imports no SDK."""
    status = getattr(exc, "status_code", None)
    if isinstance(status, int) and hasattr(exc, "body"):
        body = exc.body
        error = body.get("error") if isinstance(body, dict) else None
        error = error if isinstance(error, dict) else {}
        kind = error.get("type") if isinstance(error.get("type"), str) else None
        message = error.get("message") if isinstance(error.get("message"), str) else None
        if message is None and isinstance(body, str) and body.strip():
            message = body.strip()
        request_id = getattr(exc, "request_id", None)
        if not request_id and isinstance(body, dict) and isinstance(body.get("request_id"), str):
            request_id = body["request_id"]
        foreign = not type(exc).__module__.startswith("anthropic")
        if foreign and kind is None and message is None and str(exc).strip():
            message = str(exc).strip()  # not an Anthropic SDK error (litellm's): its own words are all it has
        text = f"HTTP {status}" + (f" {kind}" if kind else "") + (f": {message}" if message else "")
        return text + (f" [request {request_id}]" if request_id else "")
    names = {c.__name__ for c in type(exc).__mro__}
    if "APITimeoutError" in names:
        return "the request timed out"
    if "APIConnectionError" in names:
        return "the connection to the server failed"
    return str(exc)

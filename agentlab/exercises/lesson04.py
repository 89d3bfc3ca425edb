"""Lesson 04, refusal: stop, explain, never resend to the same model.

The learner writes ``on_refusal(message, model, fallback_model, fallback_used) -> (action, detail)`` for a reply
whose stop_reason is ``refusal``:

- ``("retry", fallback_model)`` when a refusal-fallback model is configured, differs from the current model,
  and has not been tried yet in this run (the API docs' advice, as an opt-in);
- ``("end", text)`` otherwise, where ``text`` explains the refusal: it names ``stop_details.category`` and
  quotes ``stop_details.explanation`` when the reply carries them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from . import exercise
from ..core.transitions import DEFAULT_MODEL

Message = dict[str, Any]
SONNET = DEFAULT_MODEL  # the model a run uses (data/models.yaml)
HAIKU = "claude-haiku-4-5"


def _refusal(category: str | None = None, explanation: str | None = None, text: str = "") -> Message:
    details = None if category is None and explanation is None else {
        "type": "refusal", "category": category, "explanation": explanation}
    content = [{"type": "text", "text": text}] if text else []
    return {"type": "message", "role": "assistant", "content": content, "stop_reason": "refusal",
            "stop_details": details}


# (case, reply, model, fallback_model, fallback_used, expected action, expected fallback or words in the text)
CASES: tuple[tuple[str, Message, str, str | None, bool, str, tuple[str, ...]], ...] = (
    ("category and explanation, no fallback", _refusal("cyber", "The request could enable cyber harm."),
     SONNET, None, False, "end", ("cyber", "The request could enable cyber harm.")),
    ("category only", _refusal("bio"), SONNET, None, False, "end", ("bio",)),
    ("no stop_details at all", _refusal(text="I can't help with"), SONNET, None, False, "end", ()),
    ("a fallback model is set", _refusal("cyber"), SONNET, HAIKU, False, "retry", (HAIKU,)),
    ("the fallback was already tried", _refusal("cyber"), HAIKU, HAIKU, True, "end", ("cyber",)),
    ("the fallback is the model that refused", _refusal("cyber"), HAIKU, HAIKU, False, "end", ("cyber",)),
)

Policy = Callable[[Message, str, "str | None", bool], tuple[str, str]]


@exercise("lesson04", "on_refusal")
def check_on_refusal(on_refusal: Policy) -> str:
    """Raise AssertionError listing every case where ``on_refusal`` retries wrongly or explains too little."""
    wrong = []
    for case, message, model, fallback, used, action, needed in CASES:
        try:
            got = on_refusal(message, model, fallback, used)
        except Exception as exc:
            wrong.append(f"- {case}: it raised {type(exc).__name__}: {exc}")
            continue
        if not (isinstance(got, tuple) and len(got) == 2 and all(isinstance(x, str) for x in got)):
            wrong.append(f"- {case}: expected a pair of strings (action, detail), got {got!r}")
            continue
        if got[0] != action:
            wrong.append(f"- {case} (model {model}, fallback {fallback}, already tried {used}): expected action "
                         f"{action!r}, got {got[0]!r}")
        elif action == "retry" and got[1] != fallback:
            wrong.append(f"- {case}: retry on {fallback!r}, not on {got[1]!r}")
        elif action == "end":
            missing = [w for w in needed if w not in got[1]]
            if not got[1].strip():
                wrong.append(f"- {case}: the explanation is empty; say what happened and what the user can do")
            elif missing:
                wrong.append(f"- {case}: the explanation should mention {missing}, got {got[1]!r}")
    assert not wrong, f"{len(wrong)} of {len(CASES)} cases are wrong:\n" + "\n".join(wrong)
    return f"All {len(CASES)} cases pass: explain and stop; at most one retry, never on the model that refused."


# --- the solution, shown on demand by show_solution() and hint() ----------------------------------------

HINT = """
    First the retry: only when fallback_model is set, differs from model and fallback_used is False. Otherwise
    end with a sentence built from (message.get("stop_details") or {}): add the category and the explanation
    only when they are there, and say that sending the same request again will not help.
"""


def on_refusal(message, model, fallback_model, fallback_used):
    if fallback_model and fallback_model != model and not fallback_used:
        return ("retry", fallback_model)
    details = message.get("stop_details") or {}
    text = "The model declined this request"
    if details.get("category"):
        text += f" (category: {details['category']})"
    text += "."
    if details.get("explanation"):
        text += " " + details["explanation"]
    return ("end", text + " Sending it again will not change that: rephrase it, or try another model.")


SOLUTION = on_refusal

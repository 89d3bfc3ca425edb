"""Model-specific replies follow the model the request asks for: the output ceiling in ``max_tokens_clamp``
and the context window in ``context_window_full`` come from one dated table (data/models.yaml)."""

from __future__ import annotations

import anthropic
import pytest

from agentlab.backend.models import load_models, model_limits, model_table
from agentlab.backend.scenario import load_scenario
from agentlab.backend.scripted import ScenarioEngine
from agentlab.backend.serve import ScenarioServer
from agentlab.core.errors import ConfigError
from agentlab.observatory.observe import lenient

ASK = [{"role": "user", "content": "Explain the CAP theorem in depth."}]


def served(name: str) -> ScenarioServer:
    return ScenarioServer(ScenarioEngine(lenient(load_scenario(name))))  # as grade and observe serve it


@pytest.mark.parametrize(("model", "refused"), [("claude-3-haiku-20240307", "4096"), ("claude-sonnet-4-6", None)])
def test_the_max_tokens_ceiling_is_the_requested_model_s(model: str, refused: str | None) -> None:
    with served("max_tokens_clamp") as server:
        # a timeout of its own: the SDK asks for streaming above ~21k max_tokens with its default timeout
        client = anthropic.Anthropic(base_url=server.base_url, api_key="x", max_retries=0, timeout=60)
        assert client.messages.create(model=model, max_tokens=256, messages=ASK).stop_reason == "max_tokens"
        if refused is None:  # 64,000 is within claude-sonnet-4-6's 128,000: the whole answer
            assert client.messages.create(model=model, max_tokens=64000, messages=ASK).stop_reason == "end_turn"
            return
        with pytest.raises(anthropic.BadRequestError) as error:
            client.messages.create(model=model, max_tokens=64000, messages=ASK)
    assert error.value.body["error"]["message"] == (
        f"max_tokens: 64000 > {refused}, which is the maximum allowed number of output tokens for {model}")


@pytest.mark.parametrize(("model", "window"), [("claude-sonnet-4-6", 1_000_000),
                                              ("claude-haiku-4-5-20251001", 200_000)])
def test_a_full_window_is_the_requested_model_s(model: str, window: int) -> None:
    with served("context_window_full") as server:
        client = anthropic.Anthropic(base_url=server.base_url, api_key="x", max_retries=0)
        replies = [client.messages.create(model=model, max_tokens=1024, messages=ASK) for _ in range(4)]
    full = replies[3]
    assert full.stop_reason == "model_context_window_exceeded"
    assert full.usage.input_tokens + full.usage.output_tokens == window  # the window is full
    assert full.usage.output_tokens == 1000


def test_the_table_names_its_source_and_date_and_answers_an_unknown_model_with_the_default() -> None:
    table = model_table()
    assert table.checked and table.source.startswith("each model's page")
    assert model_limits("claude-3-haiku-20240307").max_output == 4096
    unknown = model_limits("claude-scripted")
    assert not unknown.known and unknown.model == table.default


def test_a_malformed_table_is_named(tmp_path) -> None:
    path = tmp_path / "models.yaml"
    path.write_text("checked: '2026-12-02'\nsource: x\ndefault: a\nmodels:\n  a: {context_window: 0, max_output: 5}\n")
    with pytest.raises(ConfigError, match=r"models\.yaml: models\.a: expected context_window and max_output"):
        load_models(path)


def _escalating_loop(clamps: bool):
    """A raw-SDK loop that raises max_tokens to 64,000 once on a cut-off answer; ``clamps``: and sends it again
    within the ceiling a 400 names."""
    import re

    def agent_loop(client, prompt, tools, run_tool, model="claude-sonnet-4-6"):
        messages, max_tokens = [{"role": "user", "content": prompt}], 256
        while True:
            try:
                with client.messages.stream(model=model, max_tokens=max_tokens, messages=messages) as stream:
                    reply = stream.get_final_message()
            except anthropic.BadRequestError as exc:
                ceiling = re.search(r"max_tokens: \d+ > (\d+)", str(exc))
                if not (clamps and ceiling):
                    raise
                max_tokens = int(ceiling.group(1))
                continue
            if reply.stop_reason == "max_tokens" and max_tokens < 64000:
                max_tokens = 64000
                continue
            return "".join(b.text for b in reply.content if b.type == "text")

    return agent_loop


@pytest.mark.parametrize(("clamps", "status"), [(True, "pass"), (False, "fail")])
def test_a_graded_loop_asks_for_the_scenario_s_model_so_the_clamp_is_reached(clamps: bool, status: str) -> None:
    from agentlab.grading.command import grade_function

    report = grade_function(_escalating_loop(clamps), ["max_tokens_clamp"], timeout=30)
    grade = report.grades[0]
    assert {r["model"] for r in grade.record["requests"]} == {load_scenario("max_tokens_clamp").model}
    check = grade.check("clamp_max_tokens")
    assert check is not None and check.status == status, check


# the models the SDK names that the pages read do not describe (no window, ceiling or price to serve them with)
NOT_DESCRIBED = {"claude-mythos-5-2": "no page read gives its limits or prices",
                 "claude-mythos-preview": "a research preview; no page read gives its limits or prices"}


def test_every_model_the_sdk_names_is_in_the_tables_or_said_to_be_missing() -> None:
    """data/models.yaml and data/prices.yaml follow the SDK's model list (anthropic.types.ModelParam): a model
    added to the SDK fails here until it is served with its limits and prices, or said to be undescribed."""
    import typing

    from anthropic.types import ModelParam

    from agentlab.core.cost import load_prices

    named = {m for arg in typing.get_args(ModelParam) for m in typing.get_args(arg) if isinstance(m, str)}
    table, prices = load_models(), load_prices()
    assert "claude-opus-5-5" in named and len(named) > 15
    for model in sorted(named - set(NOT_DESCRIBED)):
        limits = table.limits(model)
        assert limits.known, f"{model} is not in data/models.yaml"
        assert prices.price(model) is not None, f"{model} is not in data/prices.yaml"
    assert not set(NOT_DESCRIBED) & set(table.models)


def test_the_models_with_classifiers_fall_back_to_models_in_the_table() -> None:
    table = load_models()
    assert table.limits("claude-opus-5-5").fallbacks == ("claude-opus-4-8",)
    assert table.limits("claude-haiku-5-5").fallbacks == () and table.limits("claude-haiku-5-5").credit_targets
    assert table.limits("claude-sonnet-4-6").fallbacks is None  # no classifiers: its refusals carry no credit
    for limits in table.models.values():
        for model in (*(limits.fallbacks or ()), *limits.credit_targets):
            assert table.limits(model).known and not table.limits(model).classifiers, (limits.model, model)


def test_a_fallback_the_table_does_not_list_is_refused_with_the_file_and_the_entry(tmp_path) -> None:
    bad = tmp_path / "models.yaml"
    bad.write_text('checked: "2026-12-07"\nsource: "x"\ndefault: a\nmodels:\n'
                   '  a: {context_window: 10, max_output: 5, fallbacks: [b]}\n')
    with pytest.raises(ConfigError, match=r"models.yaml: models.a: fallback 'b' is not one of the models"):
        load_models(bad)
    bad.write_text('checked: "2026-12-07"\nsource: "x"\ndefault: a\nmodels:\n'
                   '  a: {context_window: 10, max_output: 5, fallbacks: b}\n')
    with pytest.raises(ConfigError, match=r"models.a.fallbacks: expected a list of model names"):
        load_models(bad)


def test_a_run_plans_with_its_models_window_and_the_default_models_ceiling() -> None:
    """The bounds a run uses unless told are the model table's: the default model's window and output ceiling
    for a bare Limits(), the run's model's window for a scenario without a window of its own (a 200K model's
    run is not planned in a 1M window), and a scenario's own window or an override wins."""
    from agentlab.core.transitions import DEFAULT_MODEL, Limits
    from agentlab.lab import RunSetup

    default = model_limits(DEFAULT_MODEL)
    assert (Limits().context_window, Limits().max_tokens_ceiling) == (default.context_window, default.max_output)
    assert load_scenario("end_turn").context_window is None
    assert RunSetup.from_scenario("end_turn").config.limits.context_window == default.context_window
    small = RunSetup.from_scenario("end_turn", model="claude-haiku-4-5").config.limits.context_window
    assert small == model_limits("claude-haiku-4-5").context_window == 200_000
    assert RunSetup.from_scenario("door_code").config.limits.context_window == load_scenario("door_code").context_window
    assert RunSetup.from_scenario("end_turn", context_window=5000).config.limits.context_window == 5000
    assert RunSetup.of(prompt="hi", model="claude-haiku-4-5").config.limits.context_window == 200_000
    assert RunSetup.of(prompt="hi").config.limits.context_window == default.context_window


def test_a_default_model_without_limits_in_the_table_is_refused_naming_the_file(tmp_path, monkeypatch) -> None:
    from agentlab.core import paths, transitions

    (tmp_path / "models.yaml").write_text('checked: "2026-12-07"\nsource: "x"\ndefault: a\nmodels:\n'
                                          '  a: {context_window: 10}\n')
    monkeypatch.setattr(paths, "data_dir", lambda: tmp_path)
    with pytest.raises(ConfigError, match=r"models.yaml: default 'a' needs a row under models with context_window "
                                          r"and max_output"):
        transitions._default_model()

"""The agent frameworks observed beyond Anthropic's Python clients (agentlab.observatory.frameworks): the Vercel AI
SDK and the TypeScript SDK's tool runner (Node), the OpenAI Agents SDK on LiteLLM and strands-agents (the
`clients` extra). Their committed records are read in every run; each runner is run when its framework is
installed here (`make node-clients`, `make record`), and skipped with the reason otherwise."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import httpx
import pytest

from agentlab.backend.scenario import load_scenario, scenario_names
from agentlab.core.errors import ConfigError
from agentlab.observatory import frameworks
from agentlab.observatory.observe import CLIENTS, CLIENTS_PINS, comparable, describe, load_records, observe

REPO = Path(__file__).resolve().parent.parent
NEW_CLIENTS = ("vercel-ai", "anthropic-ts", "openai-agents", "strands")
NODE_LOCK = REPO / "clients" / "node" / "package-lock.json"


def pins() -> dict[str, str]:
    return dict(line.split("==") for line in CLIENTS_PINS.read_text(encoding="utf-8").splitlines()
                if line and not line.startswith("#"))


def locked(package: str) -> str:
    return json.loads(NODE_LOCK.read_text(encoding="utf-8"))["packages"][f"node_modules/{package}"]["version"]


# the version each client's records are of: the pins file (Python) or the lock file (Node)
PINNED = {"vercel-ai": lambda: locked("ai"), "anthropic-ts": lambda: locked("@anthropic-ai/sdk"),
          "openai-agents": lambda: pins()["openai-agents"], "strands": lambda: pins()["strands-agents"]}


def committed(client: str) -> dict[str, dict]:
    versions = [v for c, v in load_records() if c == client]
    assert versions == [PINNED[client]()], f"{client}: records of {versions}, pinned {PINNED[client]()}"
    return load_records()[(client, versions[0])]


@pytest.mark.parametrize("client", NEW_CLIENTS)
def test_the_committed_records_cover_every_scenario_at_the_pinned_version(client: str) -> None:
    records = committed(client)
    assert sorted(records) == sorted(scenario_names())
    for name, record in records.items():
        assert record["client"] == client and record["scenario"] == name
        assert record["requests"], f"{client} {name}: no request reached the server"
        assert all(r["path"] == "/v1/messages" for r in record["requests"]), (client, name)
        describe(record)  # every record reads as a table cell


@pytest.mark.parametrize("client", NEW_CLIENTS)
def test_every_record_states_the_options_that_decide_a_branch(client: str) -> None:
    """Retries, server tools and thinking are in every record's settings, as the scenario set them."""
    for name, record in committed(client).items():
        settings, scenario = record["settings"], load_scenario(name)
        retries = settings.get("max_retries", settings.get("litellm_num_retries", "missing"))
        assert retries != "missing", (client, name)
        assert "server_tools" in settings and "thinking" in settings, (client, name)
        assert bool(settings["thinking"]) == bool(scenario.thinking), (client, name)


def test_the_node_versions_are_the_locked_ones_and_the_provider_is_recorded() -> None:
    package = json.loads((REPO / "clients" / "node" / "package.json").read_text(encoding="utf-8"))
    assert all(v[0].isdigit() for v in package["dependencies"].values()), "exact versions only"
    for record in committed("vercel-ai").values():
        assert record["settings"]["@ai-sdk/anthropic"] == locked("@ai-sdk/anthropic")
        assert record["settings"]["base_url"] == "<server>/v1"


def test_the_offline_settings_are_set_and_said() -> None:
    for record in committed("openai-agents").values():
        assert record["settings"]["env"] == frameworks.OFFLINE_ENV
        assert record["settings"]["tracing_disabled"] is True
        assert any("run offline" in note and "LITELLM_LOCAL_MODEL_COST_MAP" in note for note in record["notes"])
        assert record["settings"]["litellm"] == pins()["litellm"]
    for record in committed("strands").values():
        assert record["settings"]["anthropic"] == pins()["anthropic"]


def test_the_clients_are_registered_with_a_description() -> None:
    for client in NEW_CLIENTS:
        assert CLIENTS[client].about


def test_the_tool_endpoint_runs_agentlabs_tools_and_reports_errors() -> None:
    registry = frameworks.scenario_tools(load_scenario("tool_use"))
    with frameworks.tool_endpoint(registry) as url:
        ok = httpx.post(url, json={"name": "calculator", "input": {"expression": "1234 + 5678"}}).json()
        bad = httpx.post(url, json={"name": "calculator", "input": {"expression": "1 / 0"}}).json()
        unknown = httpx.post(url, json={"name": "nope", "input": {}}).json()
    assert ok == {"content": "6912", "is_error": False}
    assert bad["is_error"] and "zero" in bad["content"]
    assert unknown["is_error"] and "Unknown tool 'nope'" in unknown["content"]
    assert frameworks.scenario_tools(load_scenario("end_turn")).schemas() == []


def test_a_missing_node_install_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(frameworks, "NODE_CLIENTS", tmp_path / "tool" / "node-clients")
    monkeypatch.setattr(frameworks, "project_dir", lambda: tmp_path)
    monkeypatch.setattr(frameworks.shutil, "which", lambda name: "/usr/bin/node")
    with pytest.raises(ConfigError, match=r"ai is not installed in tool/node-clients: run `make node-clients`"):
        frameworks.node_version("ai")


def test_a_missing_python_framework_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    real_import = builtins.__import__

    def no_frameworks(name, *args, **kwargs):
        if name.split(".")[0] in ("agents", "litellm", "strands"):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_frameworks)
    for runner in (frameworks.run_openai_agents, frameworks.run_strands):
        with pytest.raises(ConfigError, match=r"clients` extra.*make record"):
            runner(load_scenario("end_turn"), "http://127.0.0.1:1", Path("."), 5)


def _installed(client: str) -> str | None:
    """Why ``client`` cannot run here, or None."""
    if client in ("openai-agents", "strands"):
        module = {"openai-agents": "agents", "strands": "strands"}[client]
        if importlib.util.find_spec(module) is None:
            return f"{client} is not installed here (the `clients` extra: `make record` installs it into .venv-clients)"
    try:
        version = CLIENTS[client].version()
    except ConfigError as exc:
        return str(exc)
    if version != PINNED[client]():
        return f"{client} {version} is installed, the records are of {PINNED[client]()}"
    return None


@pytest.mark.parametrize("client", NEW_CLIENTS)
def test_the_runner_reproduces_its_committed_records(client: str, tmp_path: Path) -> None:
    """A tool call and a plain answer, re-recorded through the framework's own loop, as committed."""
    reason = _installed(client)
    if reason:
        pytest.skip(reason)
    fresh = observe(client, ["tool_use", "end_turn"], out=tmp_path)
    saved = committed(client)
    for record in fresh:
        assert comparable(record) == comparable(saved[record["scenario"]]), describe(record)
    tool_use = next(r for r in fresh if r["scenario"] == "tool_use")
    assert tool_use["requests"][1]["appended"]["tool_results"][0]["content"] == "6912"


def test_the_clients_table_gives_each_clients_options_and_the_branches_it_reached() -> None:
    from agentlab.grading.matrix import clients_matrix

    table = clients_matrix().set_index("reproduce")
    assert table.loc["agentlab observe vercel-ai", "options"] == (
        "retries 2; server tools: web_search; thinking where the scenario enables it")
    assert table.loc["agentlab observe openai-agents", "options"] == (
        "retries 0; no server tools; thinking where the scenario enables it")
    assert table.loc["agentlab observe pydantic-ai", "options"].endswith("thinking not stated")
    assert (table["reached"] <= table["records"]).all()


def test_a_cell_says_when_its_run_never_reached_the_branch() -> None:
    from agentlab.grading.matrix import NOT_REACHED, branch_reached, comparison_matrix

    record = committed("anthropic-ts")["end_turn"]
    assert branch_reached(record)
    stopped = {**record, "scenario": "refusal", "row": "5"}  # a final answer: it never got a refusal
    assert not branch_reached(stopped)
    table = comparison_matrix().set_index("scenario")
    assert not any(NOT_REACHED in str(cell) for cell in table.loc["end_turn"])
    # strands and openai-agents drop the redacted_thinking block and get the API's 400 before the pause_turn
    assert table.loc["redacted_thinking", "strands 1.62.0"].endswith(f"({NOT_REACHED})")
    assert NOT_REACHED not in table.loc["redacted_thinking", "vercel-ai 6.0.325"]

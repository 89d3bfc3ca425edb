"""``agentlab observe CLIENT [SCENARIO...]``: run a client against each scenario and record what it does.

Each scenario is served by a fresh :class:`~agentlab.backend.serve.ScenarioServer`; the client runs once against it;
what the client sent is turned into a normalised behaviour record (one JSON file per scenario, under
``data/observed/<client>/<version>/``): every request with its model, ``max_tokens``, whether it streamed,
what it appended to the conversation since the previous request (``diff_requests``), and an action label
(``retry``, ``escalate``, ``tool_results``, ``continuation``, ``resume``, ``nudge``, ``reprompt``,
``summary``, ``compacted``, ...); then the client's final result. Wall time is kept apart, under ``timing``
(the whole run, and when each request arrived, in seconds after the first), so that comparisons can leave it
out.

While observing, the scenario's ``expect`` checks do not answer with a 400: a foreign client may well send
something else, and the point is to see what it does next. They are evaluated anyway and recorded per
request as ``expect_unmet``. A request beyond the end of the script gets a plain ``end_turn`` reply saying the
script is used up (not an HTTP error, which a client could retry), and is counted in ``beyond_script``.

Clients (``CLIENTS``): ``agentlab`` (this CLI, in a subprocess), ``tool-runner`` (the anthropic SDK's beta
tool runner, in-process), ``claude-code`` (the Claude Code CLI, headless; ``claude-code@VERSION`` picks an
installed version, ``make claude-code`` installs them), ``pydantic-ai`` (a pydantic-ai ``Agent`` with the demo
tools) and ``langchain`` (``langchain.agents.create_agent`` with ``ChatAnthropic``). The last two need the
``clients`` extra, which ``make record`` installs into its own venv. Any other agent is one runner function
away: ``observe("my-agent", runner=my_runner, version="1.0")``.

A record (``RECORD_FORMAT`` 1) is one JSON object: ``format``, ``client``, ``version``, ``scenario``, ``row``,
``description``, ``settings`` (how the client was run), ``notes``, ``requests``, ``probes`` (non-model
requests such as ``HEAD /``), ``side_requests`` (where there were any: requests beside the loop, a title or a
quota probe, each ``what``, ``model`` and ``path``, answered without using a step), ``summary``
(``requests``, ``actions``, ``max_tokens``, ``max_tokens_raised``, ``models``, ``streamed``, ``error_replies``,
``beyond_script``, ``expect_unmet``, ``steps_used``), ``result``
(the client's own ending: ``exit_code``, ``subtype``/``raised``/``stop_reason``, ``is_error``, ``text``, ...)
and ``timing`` (wall time and when each request arrived, left out of comparisons). Each request has ``n``,
``path``, ``model``, ``max_tokens``, ``stream``, ``step``, ``kind`` (the engine's: ``message``, ``stream``, ``error``,
``summary``, ``prompt_too_long``, ``unexpected`` for a request beyond the script, ...), ``action``,
``reply`` (status, stop_reason, block types or error type), ``appended`` (:func:`diff_requests`),
``tokens`` (the request's estimated size, measured with what differs between machines replaced by
placeholders: ``<tmp>``, ``<python>``, ``<repo>``, ``<os-release>``, ``<date>``; see
:func:`machine_replacements`), ``expect_unmet`` when a step's check did not hold, ``not_reached`` when the
scripted reply could not be sent as written (a tool or thinking the request did not offer or enable), and for
an error reply
``error`` (its message), ``headers`` (the retry-steering headers sent: ``x-should-retry``, ``retry-after``)
and ``api_headers`` (what the real API sends in that case, from the scenario). Fields are only ever added,
never renamed.

The clients are in :mod:`~agentlab.observatory.observe_clients`, building, reading and describing records in
:mod:`~agentlab.observatory.records`; this module runs the observations and the command line
(:func:`observe_main`) and names all of them.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from agentlab.backend.scenario import Scenario, load_scenario, scenario_names
from agentlab.backend.scripted import ScenarioEngine
from agentlab.backend.serve import ScenarioServer
from agentlab.core.errors import ConfigError
from agentlab.core.guard import check_outputs
from agentlab.observatory.observe_clients import (  # noqa: F401  (re-exported: agentlab.observatory.observe keeps every name)
    CLAUDE_BIN,
    CLAUDE_CODE_PINNED,
    CLAUDE_DIR,
    CLAUDE_MAX_TURNS,
    CLIENTS,
    OBSERVE_KEY,
    SANDBOX_DIR,
    Client,
    Runner,
    claude_bin,
    claude_version,
    client_env,
    client_version,
    installed_claude_versions,
    resolve_client,
    run_agentlab,
    run_agentlab_in_process,
    run_claude_code,
    run_langchain,
    run_pydantic_ai,
    run_tool_runner,
)
from agentlab.observatory.records import (  # noqa: F401  (re-exported: agentlab.observatory.observe keeps every name)
    CLIENTS_PINS,
    OBSERVED_DIR,
    RECORD_FORMAT,
    REPO,
    RETRY_HEADERS,
    SERVER_TOOLS_NOT_OFFERED,
    TEXT_LIMIT,
    ClientOutcome,
    build_record,
    classify,
    comparable,
    describe,
    describe_message,
    diff_requests,
    drift,
    load_records,
    machine_replacements,
    outcome,
    overflowed,
    record_path,
    reply_summary,
    scrub,
    shorten,
    version_key,
    write_record,
)

DEFAULT_TIMEOUT = 180.0


# -- one observation -----------------------------------------------------------------------------------------

def lenient(scenario: Scenario) -> Scenario:
    """The scenario without its ``expect`` checks (they are evaluated afterwards instead)."""
    return scenario.model_copy(update={"steps": [s.model_copy(update={"expect": None}) for s in scenario.steps]})


def observing_engine(scenario: Scenario, replacements: list[tuple[str, str]]) -> ScenarioEngine:
    """The engine observe and grade serve a scenario with: :func:`lenient` (no 400 for an unmet ``expect``),
    each request sized with what differs between machines replaced (``replacements``)."""
    return ScenarioEngine(lenient(scenario), sizing=lambda request: scrub(request, replacements))


def observe_scenario(client: str, scenario: str | Scenario, *, version: str | None = None,
                     timeout: float = DEFAULT_TIMEOUT, runner: Runner | None = None,
                     on_served: Callable[[ScenarioServer, dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Run ``client`` once against a fresh server for ``scenario`` and return its behaviour record.

    Any agent can be observed by passing a ``runner(scenario, base_url, workdir, timeout) -> ClientOutcome``
    and a ``version`` together with a client name of your choosing. ``on_served(server, record)`` is called
    once the run is over, with the server (its ``exchanges``) and the record.
    """
    sc = scenario if isinstance(scenario, Scenario) else load_scenario(scenario)
    if runner is None:
        known = resolve_client(client)
        runner, version = known.runner, version or known.version()
    elif not version:
        raise ConfigError(f"client {client!r} has a runner of its own: give its version= too")
    name = client.partition("@")[0]
    with tempfile.TemporaryDirectory(prefix="agentlab-observe-") as tmp:
        replacements = machine_replacements(tmp)
        with ScenarioServer(observing_engine(sc, replacements)) as server:
            started = time.perf_counter()
            outcome = runner(sc, server.base_url, Path(tmp), timeout)
            wall = time.perf_counter() - started
        record = scrub(build_record(sc, server, name, version, outcome, wall, replacements), replacements)
        if on_served is not None:
            on_served(server, record)
        return record


def observe(client: str, scenarios: Iterable[str] | None = None, *, out: str | Path | None = None,
            jobs: int | None = None, timeout: float = DEFAULT_TIMEOUT, in_process: bool = False,
            progress: Callable[[dict[str, Any], Path], None] | None = None, runner: Runner | None = None,
            version: str | None = None) -> list[dict[str, Any]]:
    """Observe ``client`` on each scenario (default: all), write the records, return them in order.

    ``client`` is a name from ``CLIENTS`` (``claude-code@VERSION`` for an installed Claude Code version), or
    any name together with ``runner=`` and ``version=``: adding a client is one function. ``in_process=True``
    runs the ``agentlab`` client through ``cli.main`` here instead of a subprocess, one scenario at a time;
    the records are the same.
    """
    if runner is None:
        known = resolve_client(client)
        runner, default_jobs = known.runner, known.jobs
        if in_process and client == "agentlab":  # captures stdout: one scenario at a time
            runner, default_jobs, jobs = run_agentlab_in_process, 1, 1
        version = version or known.version()
    else:
        if not version:
            raise ConfigError(f"client {client!r} has a runner of its own: give its version= too")
        default_jobs = 1
    names = list(scenarios or scenario_names())
    loaded = [load_scenario(n) for n in names]  # fail on a bad name before running anything
    jobs = jobs or default_jobs
    root = Path(out) if out else OBSERVED_DIR
    for sc in loaded:  # a record never overwrites a scenario file
        check_outputs({"--out": record_path(root, client, version, sc.name)}, {"a scenario file": sc.source})

    def one(sc: Scenario) -> dict[str, Any]:
        record = observe_scenario(client, sc, version=version, timeout=timeout, runner=runner)
        try:
            path = write_record(record, out)
        except OSError as exc:
            raise ConfigError(f"--out {root}: cannot write the record of {sc.name}: {exc.strerror or exc}") from None
        if progress is not None:
            progress(record, path)
        return record

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        return list(pool.map(one, loaded))


def observe_main(args: Any) -> int:
    """``agentlab observe CLIENT [SCENARIO...] [--out DIR] [--check] [--list]``."""
    if args.list or not args.client:
        width = max(map(len, CLIENTS))
        for name, client in CLIENTS.items():
            print(f"{name:{width}s} {client.about}")
        installed = installed_claude_versions()
        print(f"{'':{width}s} Claude Code versions installed here: {', '.join(installed) or 'none'}")
        return 0 if args.list else 2
    try:
        resolve_client(args.client).version()  # an unknown or missing client fails before anything runs
    except ConfigError as exc:
        if not args.skip_missing or str(exc).startswith("unknown client"):
            raise
        print(f"skipping {args.client}: {exc}")
        return 0

    def show(record: dict[str, Any], path: Path) -> None:
        result = record["result"]
        ending = result.get("subtype") or result.get("raised") or result.get("stop_reason")
        flag = " is_error" if result.get("is_error") else ""
        actions = ", ".join(record["summary"]["actions"]) or "-"
        code = "" if result.get("exit_code") is None else f" (exit {result['exit_code']})"
        print(f"{record['scenario']:26s} {record['summary']['requests']:2d} request(s)  {actions}  -> "
              f"{ending}{flag}{code}  {path}", flush=True)

    if args.out is not None and os.path.exists(args.out) and not os.path.isdir(args.out):
        raise ConfigError(f"--out {args.out}: is a file; --out takes a folder for the behaviour records")
    if args.out is not None and not args.check:
        try:  # before anything runs: a folder that cannot be made (/dev/full/x, /proc/self/x) is bad usage
            Path(args.out).mkdir(parents=True, exist_ok=True)
        except (OSError, ValueError) as exc:
            raise ConfigError(f"--out {args.out}: cannot create the folder: {getattr(exc, 'strerror', None) or exc}"
                              ) from None
    if not args.check:
        observe(args.client, args.scenarios or None, out=args.out, progress=show)
        return 0
    with tempfile.TemporaryDirectory(prefix="agentlab-check-") as tmp:
        fresh = observe(args.client, args.scenarios or None, out=tmp,
                        progress=lambda record, path: show(record, Path("<tmp>") / path.relative_to(tmp)))
    differing = drift(fresh, args.out)
    for line in differing:
        print(f"DRIFT {line}")
    print(f"{args.client}: {len(fresh) - len(differing)} of {len(fresh)} record(s) reproduce the committed ones")
    return 1 if differing else 0



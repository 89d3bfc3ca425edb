"""The observatory: what real clients do at the end of a turn, recorded against ``agentlab serve``.

observe         ``agentlab observe``: run a client against each scenario and record its requests
observe_clients the clients observe runs (agentlab, tool-runner, claude-code, pydantic-ai, langchain)
frameworks      the agent frameworks observe runs: Vercel AI SDK, TypeScript tool runner, openai-agents, strands
records         behaviour records: built from what the server saw, diffed, classified, loaded, described
record_types    the record format as frozen types (Record, Request, Reply, ...) and parse_record, read by the rules
compare         the comparison table: article, API docs, each observed client, agentlab
matrix          the tables with each run's reach (branch reached or not) and each client's options
replay          a recorded client run turned into an agentlab trace (data only)
facts           what compaction keeps and costs, measured on scenario runs
grade           ``agentlab grade``: the conformance rules checked on any client's recorded requests
grade_rules     the careful-loop rules (Check, Rule, RULES), each a pure function of a record
grade_serving   a command or a Python loop run against each scenario's scripted server, and graded
grade_report    the report cards (ScenarioGrade, Report): rendered, saved, loaded; the committed records graded
grade_output    what grade writes for machines: the JSON report (its schema in schemas/), JUnit XML, the baseline
grade_verdict   every verdict (pass, fail, policy, not_reached) of a rule, a scenario, a report: decided once
transcript      Claude Code's session files (``~/.claude/projects``) read call by call (data only)
transcript_trace a session as agentlab's events, for the stepper and the plots
sessions        ``agentlab sessions`` and ``agentlab replay``; example transcripts recorded and checked

Imports the core, the backend and ``agentlab.lab``; never the notebook UI.
"""

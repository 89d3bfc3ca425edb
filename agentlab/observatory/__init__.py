"""The observatory: what real clients do at the end of a turn, recorded against ``agentlab serve``.

observe  run a client (Claude Code, agentlab, ...) against each scenario and record its requests
frameworks  the agent frameworks observe runs: Vercel AI SDK, TypeScript tool runner, openai-agents, strands
compare  the comparison table: article, API docs, each observed client, agentlab
matrix   the tables with each run's reach (branch reached or not) and each client's options
replay   a recorded client run turned into an agentlab trace (data only)
facts    what compaction keeps and costs, measured on scenario runs
grade    ``agentlab grade``: the conformance rules checked on any client's recorded requests

Imports the core, the backend and ``agentlab.lab``; never the notebook UI.
"""

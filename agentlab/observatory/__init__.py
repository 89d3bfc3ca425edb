"""The observatory: what real clients do at the end of a turn, recorded against ``agentlab serve``.

observe         ``agentlab observe``: run a client against each scenario and record its requests
observe_clients the clients observe runs (agentlab, tool-runner, claude-code, pydantic-ai, langchain)
frameworks      the agent frameworks observe runs: Vercel AI SDK, TypeScript tool runner, openai-agents, strands
records         behaviour records: built from what the server saw, diffed, classified, loaded, described
record_types    the record format as frozen types (Record, Request, Reply, ...) and parse_record
compare         the comparison table: article, API docs, each observed client, agentlab; the lessons' claims checked
replay          a recorded client run turned into an agentlab trace (data only)
facts           what compaction keeps and costs, measured on scenario runs

Grading those records (and any agent) is agentlab.grading; Claude Code's own session files are agentlab.sessions.
Imports the core, the backend and ``agentlab.lab``; never the notebook UI.
"""

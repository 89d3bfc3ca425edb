"""The observatory: what real clients do at the end of a turn, recorded against ``agentlab serve``.

observe  run a client (Claude Code, agentlab, ...) against each scenario and record its requests
compare  the comparison table: article, API docs, each observed client, agentlab
replay   a recorded client run turned into an agentlab trace (data only)
facts    what compaction keeps and costs, measured on scenario runs
grade    ``agentlab grade``: the conformance rules checked on any client's recorded requests
transcript        Claude Code's session files (``~/.claude/projects``) read call by call (data only)
transcript_trace  a session as agentlab's events, for the stepper and the plots
sessions          ``agentlab sessions`` and ``agentlab replay``; example transcripts recorded and checked

Imports the core, the backend and ``agentlab.lab``; never the notebook UI.
"""

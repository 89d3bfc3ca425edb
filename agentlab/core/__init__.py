"""The core: the end-of-turn decision and the loop that applies it. Imports nothing else of agentlab.

errors       the exceptions raised for bad input (an API's failure is no exception: wire classifies it)
extras       the lab extra (the notebook stack): its name, and the error naming it where it is missing
guard        printable-only terminal output, redaction, outputs checked against inputs, file locks
text         others' text (stderr, errors, hook output) printable in a report: escape sequences removed
paths        where the data lives (scenarios, hooks, sandbox, observed records), in a checkout or a wheel
transitions  the decision table, Limits, LoopState and the pure ``decide()``
compaction   context accounting (ContextMeter) and the history compaction strategies
blocks       a content block as the summaries of blocks read it (the trace line, compaction, the pane)
tools        the tool registry and the lessons' demo tools
processes    a command started in a session of its own and tagged, ended with everything it started
hooks        Claude Code's hook protocol, for Python callables and shell commands
caching      where the loop puts cache_control breakpoints, and the prompt cache the scripted backend keeps
cost         the dated price table (data/prices.yaml) applied to a response's usage
events       one frozen dataclass per event kind, with its JSONL form
trace        the event stream: Trace, JSONL, a pandas frame
sdk          the SDK, imported with the collector paused and what it made frozen
calls        a model call with a deadline of its own, and a word when it has gone quiet
wire         one Messages API or count_tokens call through the SDK, and its failure classified (a Failure)
config       RunConfig: a run's settings, one frozen value that checks itself
loop         AgentLoop(client, config): asks ``decide()`` and performs what it says, with a sync or an async client
"""

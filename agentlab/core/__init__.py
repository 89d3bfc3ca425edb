"""The core: the end-of-turn decision and the loop that applies it. Imports nothing else of agentlab.

errors       the exceptions raised for bad input
transitions  the decision table, Limits, LoopState and the pure ``decide()``
compaction   context accounting (ContextMeter) and the history compaction strategies
tools        the tool registry and the lessons' demo tools
hooks        Claude Code's hook protocol, for Python callables and shell commands
trace        the event stream: Trace, JSONL, a pandas frame
loop         AgentLoop: calls the model, asks ``decide()``, performs what it says
"""

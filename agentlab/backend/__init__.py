"""The scripted backend: scenario files and the engine that answers Messages API requests from them.

scenario  the scenario file format (pydantic models) and where the files live
scripted  the engine, served to the real ``anthropic`` client through an in-process transport
serve     the same engine behind a real HTTP server (``agentlab serve``)
validate  the API's request validation: what it answers with a 400, in its words
offered   a scripted reply fitted to what the request offers (tools, tool_choice, thinking, server tools)
models    the models' output ceilings, context windows and refusal fallbacks (data/models.yaml)
fallback  refusal fallbacks: server-side ``fallbacks`` chains and fallback credit tokens
context_edits  server-side compaction and context editing (what the model reads of a request)
threads   conversations held between turns for clients that thread (the SDK's tool runner)

Imports the core only.
"""

"""The scripted backend: scenario files and the engine that answers Messages API requests from them.

scenario  the scenario file format (pydantic models) and where the files live
scripted  the engine, served to the real ``anthropic`` client through an in-process transport
serve     the same engine behind a real HTTP server (``agentlab serve``)

Imports the core only.
"""

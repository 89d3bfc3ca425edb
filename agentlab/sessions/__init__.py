"""Claude Code's own session files (``~/.claude/projects``): ``agentlab sessions`` and ``agentlab replay``.

transcript  a session file read call by call: requests, replies, stop reasons, the model of each call (data only)
trace       a session as agentlab's events, for the stepper and the plots
command     ``agentlab sessions`` and ``agentlab replay``; the example transcripts recorded and checked
"""

"""The notebook UI: everything a learner sees, read from the trace.

plots    matplotlib figures of a run (tokens, context fill, compactions, recoveries, the decision path)
report   one-line summaries of events (the CLI's table, the widget's log)
widgets  the Stepper and the ReplayStepper (ipywidgets)

Imports anything below it; nothing below imports it.
"""

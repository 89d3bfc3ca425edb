"""The notebook UI: everything a learner sees, read from the trace.

plots    matplotlib figures of a run (tokens, context fill, compactions, recoveries, the decision path), and
         LiveFigure, the stepper's one figure per plot kind drawn again at each Step
canvas   an Agg canvas that lays out and draws each distinct text once (what keeps a Step quick)
report   one-line summaries of events (the CLI's table, the widget's log)
widgets  the Stepper and the ReplayStepper (ipywidgets)

Imports anything below it; nothing below imports it.
"""

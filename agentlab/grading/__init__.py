"""``agentlab grade``: the careful-loop rules checked on what an agent sent, for any client.

command   ``agentlab grade``: grade a command, a Python loop, or the committed records of real clients
rules     the careful-loop rules (Check, Rule, RULES), each a pure function of a record, each citing its source
serving   a command or a Python loop run against each scenario's scripted server, its requests recorded
verdict   every verdict (pass, fail, policy, not_reached) of a rule, a scenario, a report: decided once
report    the report cards (ScenarioGrade, Report): rendered, saved, loaded; the committed records graded
output    what grade writes for machines: the JSON report (its schema in schemas/), JUnit XML, the baseline
matrix    the tables of each run's reach (branch reached or not) and each client's options

The rules read records (agentlab.observatory.record_types); the CI distribution agentlab-grade (the pytest
plugin, the agentlab-grade command, the heatmap) is a thin layer over this package.
"""

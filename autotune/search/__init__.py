"""The search: the coordinator's loop (ask, submit, wait, tell) and its parts: what it knows
while it searches, trials answered without measuring, telling results, the running Pareto
front and the bounds no configuration meets so far, the observers it tells (the tracker, the
progress), the budget, leases and reaping of dead coordinators' trials, Ctrl-C, and warm
starts from a previous study. It ends with the baseline's record; the conclusion follows."""

"""The search: the coordinator's loop (ask, submit, wait, tell) and its parts: what it knows
while it searches, trials answered without measuring, telling results, the budget, leases and
reaping of dead coordinators' trials, Ctrl-C, and warm starts from a previous study."""

"""After the search: the feasible Pareto front, the finalists head to head and the decision
between them, the export of the chosen configuration and the tuned-config file."""

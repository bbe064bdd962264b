"""After the search (`autotune.tuning.search_then_conclude`): the choice from the feasible
Pareto front, the finalists head to head and the decision between them, the export of the
chosen configuration and the tuned-config file."""

"""The search space: YAML dimensions narrowed by the knobs' rules and by the hardware of the
nodes that run the trials."""

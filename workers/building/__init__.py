"""Building variants and their sessions: each knob's implementation, transforms (pruning,
precision, sharding) and the runtimes' sessions."""

"""Where trials run: the executors (in-process, Ray, replay of a recorded table) and the Ray
cluster's nodes. The only part of the control plane that reaches the data plane (`workers`)."""

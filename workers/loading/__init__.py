"""Loading a workload: its model and data, Hugging Face directories, files carried to the node,
multi-input feeds, and the per-process cache of loaded workloads."""

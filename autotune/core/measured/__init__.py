"""Measured metrics carried in the map of measured figures, one module each: a module here
registers its `Metric` (with the `meter` that measures it) and any bound or objective a
request may name on it. `autotune.core.metrics` imports every module of this package."""

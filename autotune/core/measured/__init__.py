"""autotune's own measured metrics carried in the map of measured figures, one module each: a
module here registers its `Metric` (with the `meter` that measures it) and any bound or
objective a request may name on it, and is an `autotune.metrics` entry point of autotune's
pyproject.toml (`autotune.core.plugins`)."""

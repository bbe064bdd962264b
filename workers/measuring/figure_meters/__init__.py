"""autotune's own figure meters, one module each: a module here registers a factory with
`workers.measuring.figure_meter.register_figure_meter` under the name its metrics give in
`Metric.meter`, and is an `autotune.figure_meters` entry point of autotune's pyproject.toml."""

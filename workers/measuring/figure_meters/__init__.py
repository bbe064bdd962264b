"""Figure meters, one module each: a module here registers a factory with
`workers.measuring.figure_meter.register_figure_meter` under the name its metrics give in
`Metric.meter`. `workers.measuring.figure_meter` imports every module of this package."""

"""An example autotune plugin (docs/plugins.md): the engine `ort_tuned_session` (`engine`,
`engine_implementation`), the energy meter `example_cpu_time` (`meter`) and the search
strategy `example_random` (`strategy`). autotune imports each module through its entry point;
nothing here is imported by this package itself."""

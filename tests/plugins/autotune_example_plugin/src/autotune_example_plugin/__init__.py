"""An example autotune plugin (docs/plugins.md): the engine `ort_tuned_session` (`engine`,
`engine_implementation`), the energy meter `example_cpu_time` (`meter`), the search strategy
`example_random` (`strategy`) and the executor `example_in_process` (`executor`). autotune
imports each module through its entry point; nothing here is imported by this package
itself."""

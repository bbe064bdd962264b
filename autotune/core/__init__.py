"""The shared core both planes import: the trial contract, the one exception hierarchy, the
statistics of timings, the metric registry and the knob declarations. Nothing here imports
torch, ONNX Runtime or Ray, and nothing here imports the rest of autotune or the data plane."""

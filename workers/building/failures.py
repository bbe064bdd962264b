"""What a runtime's exception says about its cause: the machine's state (out of memory), which
a trial records as `oom`, or the model itself, which an engine turns into `Unsupported` with a
one-line reason."""

from __future__ import annotations

import sys


def is_out_of_memory(error: BaseException) -> bool:
    torch = sys.modules.get("torch")
    if isinstance(error, MemoryError):
        return True
    if torch is not None and isinstance(error, torch.OutOfMemoryError):
        return True
    text = str(error)
    # torch's CPU allocator raises a plain RuntimeError when the heap is exhausted; OpenVINO
    # passes a C++ std::bad_alloc on inside its own RuntimeError.
    if isinstance(error, RuntimeError) and ("can't allocate memory" in text or "bad_alloc" in text):
        return True
    # onnxruntime reports a failed allocation as a generic RuntimeException with this text.
    return type(error).__module__.startswith("onnxruntime") and "Failed to allocate" in text

"""autotune's data plane: load a workload, build model variants, measure them.

Importing this package stays cheap: torch and onnxruntime are imported where they are used.
"""

from workers.actor import TrialWorker
from workers.artifacts import evaluate_artifact, export_artifact
from workers.inspection import inspect_workload
from workers.runner import run_trial

__all__ = ["TrialWorker", "evaluate_artifact", "export_artifact", "inspect_workload", "run_trial"]

"""An int8 sensitivity ranking as files of the study's parent run: the ranked table
(`int8_sensitivity_<mode>.csv`) and a few lines that say how to read it (`.md`)."""

from __future__ import annotations

import csv
import io

from autotune.core.contract.trials import CARRIED_SHARE, SensitivityTable

COLUMNS = ("rank", "node", "op_type", "drop", "fallback_keeps_float_from")


def sensitivity_files(table: SensitivityTable) -> dict[str, str]:
    """File name -> text: the table as CSV and its summary in markdown."""
    stem = sensitivity_stem(table)
    return {f"{stem}.csv": sensitivity_csv(table), f"{stem}.md": sensitivity_markdown(table)}


def sensitivity_stem(table: SensitivityTable) -> str:
    """`int8_sensitivity_<mode>`, with `_torch` for a torch module's ranking."""
    of = "" if table.ranked == "onnx" else f"_{table.ranked}"
    return f"int8_sensitivity_{table.mode}{of}"


def sensitivity_csv(table: SensitivityTable) -> str:
    """One row per quantizable node, most sensitive first; `drop` is empty for a node that was
    not measured, and `fallback_keeps_float_from` is the precision.fallback that keeps the
    node in float (its rank)."""
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow(COLUMNS)
    for node in table.nodes:
        drop = "" if node.drop is None else f"{node.drop:.6g}"
        writer.writerow([node.rank, node.node, node.op_type or "", drop, node.rank])
    return text.getvalue()


def sensitivity_markdown(table: SensitivityTable) -> str:
    measured = sum(node.drop is not None for node in table.nodes)
    lines = [
        f"# int8 sensitivity ({table.label})",
        "",
        table.summary() + ".",
        "",
        f"Model sha256 {table.model_sha256}: {len(table.nodes)} quantizable operations, "
        f"{measured} measured in {table.seconds:.1f} s. A node's drop is 1 - fidelity of the "
        "model with that node alone in int8; `precision.fallback: k` keeps the k first rows "
        f"in float. The nodes named above carry {CARRIED_SHARE:.0%} of the summed drops; "
        "unmeasured nodes (empty drop) count as insensitive.",
        "",
        "| rank | node | op | drop |",
        "|---:|---|---|---:|",
    ]
    for node in table.nodes:
        drop = "-" if node.drop is None else f"{node.drop:.4g}"
        lines.append(f"| {node.rank} | {node.node} | {node.op_type or ''} | {drop} |")
    return "\n".join(lines) + "\n"

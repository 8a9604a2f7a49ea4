"""The job a `servebench run` was started in (an sbatch script's, `servebench submit`'s, or an interactive
`salloc` shell): its allocation is the campaign's, so no second job is asked for. Pure."""

from __future__ import annotations

from collections.abc import Mapping


def enclosing_job(env: Mapping[str, str]) -> int | None:
    """SLURM_JOB_ID of the orchestrator's environment (SLURM_JOBID on older Slurm), or None outside a job."""
    value = env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID") or ""
    return int(value) if value.isdigit() else None


def enclosing_problem(job_id: int, node_names: list[str], nodes_wanted: int) -> str | None:
    """Why the enclosing job cannot hold the campaign: a node count other than the campaign's."""
    if len(node_names) != nodes_wanted:
        return (f"servebench runs inside slurm job {job_id}, which holds {len(node_names)} node(s) "
                f"({', '.join(node_names)}), and the campaign asks for provider.nodes={nodes_wanted}: submit the "
                "campaign with `servebench submit` (its job asks for the campaign's nodes), or run it outside a job")
    return None

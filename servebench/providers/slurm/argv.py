"""The slurm provider's command lines, node-side scripts and parsers, built without touching
anything (pure), so they are unit-tested without a cluster.

Every Slurm client command gets an argv list (no shell on the orchestrator); what runs on a
node is a step whose task is argv itself (srun execs it, no shell either) or `sh -c SCRIPT sh
ARGS...`, the script fixed text and everything variable passed as arguments.
"""

from __future__ import annotations

import json
import re

from servebench.providers.remote import (  # noqa: F401 (re-exported for the provider's modules)
    BOOTSTRAP,
    DEFAULT_NODE_PATH,
    RUN_ID_CHARS,
    STATUS_SCRIPT,
    RemoteFiles,
    check_run_id,
    env_argv,
    parse_status,
    pinned_argv,
    remote_files,
    remote_run_dir,
)
from servebench.providers.slurm.spec import SlurmProviderSpec

JOB_NAME_PREFIX = "servebench-"

# Variables of the orchestrator's environment the Slurm clients would read as options or as the
# job they run in (an orchestrator started inside another allocation has SLURM_JOB_ID,
# SLURM_CPUS_PER_TASK, SRUN_CPUS_PER_TASK...): dropped, but for the cluster's address.
CLIENT_PREFIXES_DROPPED = ("SLURM_", "SALLOC_", "SRUN_", "SBATCH_")
CLIENT_VARIABLES_KEPT = frozenset({"SLURM_CONF", "SLURM_CLUSTERS"})

# Runs a function of a stdlib-only source file on the node: stdin is one JSON line
# {"file", "call", "kwargs"} then the source; stdout is the function's result as JSON.
# (The same protocol as the ssh provider's; srun forwards its stdin to the task.)

# One task per node at allocation: which node it is (Slurm's name) and the CPUs a step there may use.
PROBE = ("import json, os; print(json.dumps([os.environ.get('SLURMD_NODENAME', ''), "
         "sorted(os.sched_getaffinity(0))]), flush=True)")

# The task of a started process's step (argv: run dir, PID file, exit file, log file, then the
# command). slurmstepd makes the task a process group leader, so $$ is the group id that a stop
# signals. It records `PID START_TICKS` on the node and prints it (the orchestrator reads that
# line from the srun client: no extra step to learn the PID), runs the command with its output
# in the node's log, outlives a TERM/INT to the group (the command gets default dispositions at
# exec) and writes the command's exit status atomically; its own exit status is the command's.
LAUNCH_SCRIPT = """\
umask 077
d=$1; p=$2; e=$3; l=$4; shift 4
mkdir -p "$d" || exit 125
t=$(sed 's/.*) //' "/proc/$$/stat" | cut -d' ' -f20)
echo "$$ $t" >"$p.tmp" && mv -f "$p.tmp" "$p" || exit 125
echo "started $$ $t"
trap : TERM INT
"$@" </dev/null >"$l" 2>&1
c=$?
echo "$c" >"$e.tmp" && mv -f "$e.tmp" "$e"
exit "$c"
"""

# Prints `exit N`, `alive` or `gone` for (pid, start ticks, exit file); /proc, not `kill -0`:
# a zombie and a reused PID both pass `kill -0`.

# srun's own lines about a task's end: the step's exit code says it already.
_SRUN_TASK_END = re.compile(r"^srun: error: \S+: tasks? [0-9,-]+: (Exited with exit code \d+|Terminated|Killed)$")
_SRUN_FORCE_TERMINATED = re.compile(r"^srun: Force Terminated (job|StepId=)\S*$")


def job_name(run_id: str) -> str:
    return JOB_NAME_PREFIX + check_run_id(run_id)


def client_env(environ: dict[str, str], spec: SlurmProviderSpec) -> dict[str, str]:
    """The Slurm clients' environment: the orchestrator's without job context, plus the block's
    `client_env` and `slurm_conf`. Steps take from it what the block's `export` names (`export_option`)."""
    env = {name: value for name, value in environ.items()
           if name in CLIENT_VARIABLES_KEPT or not name.startswith(CLIENT_PREFIXES_DROPPED)}
    env |= spec.client_env
    if spec.slurm_conf is not None:
        env["SLURM_CONF"] = str(spec.slurm_conf.expanduser())
    return env


def salloc_argv(spec: SlurmProviderSpec, name: str) -> list[str]:
    """An allocation without a shell (salloc returns once it is granted; the job holds the nodes
    until scancel or its time limit; not a batch job, so never requeued), one task per node with
    cpus_per_node CPUs, given up after `allocate_timeout_s`."""
    argv = ["salloc", "--no-shell", f"--job-name={name}", f"--nodes={spec.nodes}", "--ntasks-per-node=1",
            f"--cpus-per-task={spec.cpus_per_node}", f"--time={spec.time_limit}",
            f"--immediate={spec.allocate_timeout_s}"]
    if spec.partition:
        argv.append(f"--partition={spec.partition}")
    if spec.account:
        argv.append(f"--account={spec.account}")
    if spec.qos:
        argv.append(f"--qos={spec.qos}")
    if spec.constraint:
        argv.append(f"--constraint={spec.constraint}")
    if spec.nodelist:
        argv.append(f"--nodelist={','.join(spec.nodelist)}")
    if spec.exclusive:
        argv.append("--exclusive")
    return argv + list(spec.salloc_args)


def parse_granted(stderr: str) -> int | None:
    """The job id in salloc's `Granted job allocation J` (or `Pending job allocation J`)."""
    found = re.findall(r"(?:Granted|Pending) job allocation (\d+)", stderr)
    return int(found[-1]) if found else None


def parse_record(line: str) -> dict[str, str]:
    """`scontrol show ... -o` output: Key=Value pairs; a value may hold spaces (Reason=, OS=),
    so a word that is not `Key=...` belongs to the value before it."""
    record: dict[str, str] = {}
    key = None
    for word in line.strip().split(" "):
        match = re.match(r"^([A-Za-z][A-Za-z0-9_/:.]*)=(.*)$", word)
        if match:
            key = match.group(1)
            record[key] = match.group(2)
        elif key is not None:
            record[key] += " " + word
    return record


def parse_records(text: str) -> list[dict[str, str]]:
    return [parse_record(line) for line in text.splitlines() if line.strip()]


def job_state(record: dict[str, str]) -> str:
    """RUNNING, PENDING, COMPLETING, CANCELLED, TIMEOUT...: the first word of JobState."""
    return record.get("JobState", "UNKNOWN").split()[0]


def ended_message(job_id: int, state: str, node_list: str) -> str:
    """Why the allocation's nodes are gone, in the words a failed cell shows."""
    where = f"slurm job {job_id}" + (f" on {node_list}" if node_list else "")
    if state == "CANCELLED":
        return f"{where}: allocation cancelled"
    if state == "GONE":
        return f"{where}: allocation ended: the controller no longer knows the job"
    if state == "RELEASED":
        return f"{where}: allocation released by this run"
    return f"{where}: allocation ended: {state}"


def export_option(export: str | list[str]) -> str:
    """srun's --export for the block's `export`: `all` is ALL (the login node's whole environment);
    a list is those names (and SLURM_*); `none` is no name at all. Unless PATH is among the names, a
    step's PATH is DEFAULT_NODE_PATH (srun's own NONE would leave it unset, and every command would
    need an absolute path); the node's `setup` extends it."""
    if export == "all":
        return "--export=ALL"
    names = [] if export == "none" else list(export)
    if "PATH" not in names:
        names.append(f"PATH={DEFAULT_NODE_PATH}")
    return "--export=" + ",".join(names)


def step_argv(job_id: int | str, node: str, argv: list[str], chdir: str, cpus: int | None = None,
              name: str | None = None, export: str = "--export=ALL") -> list[str]:
    """A one-task step on one node of the allocation, sharing its CPUs with the other steps
    (--overlap), with the environment `export` lets through (`export_option`) and no MPI set-up.
    srun execs argv itself (no shell): nothing to quote."""
    options = ["srun", "--overlap", f"--jobid={job_id}", f"--nodelist={node}", "--nodes=1", "--ntasks=1",
               export, "--mpi=none", "--quiet", f"--chdir={chdir}"]
    if cpus is not None:
        options.append(f"--cpus-per-task={cpus}")
    if name is not None:
        options.append(f"--job-name={name}")
    return options + ["--", *argv]


def probe_argv(job_id: int, nodes: int, cpus_per_node: int, python: str | list[str], chdir: str,
               export: str = "--export=ALL") -> list[str]:
    """One task on every node of the allocation with the node's CPUs, printing PROBE's line
    (`python`: the node's python, or the argv that runs it after the campaign's setup)."""
    return ["srun", "--overlap", f"--jobid={job_id}", f"--nodes={nodes}", f"--ntasks={nodes}",
            "--ntasks-per-node=1", f"--cpus-per-task={cpus_per_node}", export, "--mpi=none", "--quiet",
            f"--chdir={chdir}", "--", *([python] if isinstance(python, str) else python), "-c", PROBE]


def launch_argv(run_dir: str, files: RemoteFiles, argv: list[str]) -> list[str]:
    return ["sh", "-c", LAUNCH_SCRIPT, "sh", run_dir, files.pid, files.exit, files.log, *argv]


def status_argv(pid: int, start_ticks: int, exit_path: str) -> list[str]:
    return ["sh", "-c", STATUS_SCRIPT, "sh", str(pid), str(start_ticks), exit_path]


def parse_started(line: str) -> tuple[int, int]:
    """(pid, start ticks) from the launch script's `started PID TICKS`."""
    fields = line.split()
    if len(fields) != 3 or fields[0] != "started" or not all(f.isdigit() for f in fields[1:]):
        raise ValueError(f"the launch script printed {line!r}, not 'started PID START_TICKS'")
    return int(fields[1]), int(fields[2])


def parse_probe(stdout: str) -> dict[str, list[int]]:
    """{node name: CPU ids a step there may use} from the probe's lines."""
    found = {}
    for line in stdout.splitlines():
        if line.strip():
            name, cpus = json.loads(line)
            found[name] = [int(cpu) for cpu in cpus]
    return found


def strip_srun_noise(stderr: str) -> str:
    """The command's stderr without srun's own report of how the task ended."""
    kept = [line for line in stderr.splitlines(keepends=True)
            if not _SRUN_TASK_END.match(line.rstrip("\n")) and not _SRUN_FORCE_TERMINATED.match(line.rstrip("\n"))]
    return "".join(kept)

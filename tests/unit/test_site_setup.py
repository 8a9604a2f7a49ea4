"""A site's setup on every node: `provider.setup` (shell lines every node command runs first),
`provider.env` (environment for every node command, on no command line) and, for Slurm,
`provider.export` (what a step takes from the login node's environment).

Without a host: the prelude a remote node sources, the command lines the ssh, Slurm and local
providers build (they carry the setup; no env value is on them), srun's --export for each policy,
and the spec hash of a campaign without the fields. On the testbed (root; 2 hosts with sshd): a
process started over ssh sees what a setup line did and the campaign's env.
"""

from __future__ import annotations

import subprocess
import time

import pytest
from pydantic import ValidationError

from servebench.providers.local import LocalProvider
from servebench.providers.local.spec import LocalProviderSpec
from servebench.providers.remote import (
    DEFAULT_NODE_PATH,
    PRELUDE_RUNNER,
    SETUP_FAILED_EXIT,
    inline_setup_argv,
    prelude_argv,
    prelude_text,
)
from servebench.providers.slurm import SlurmProvider
from servebench.providers.slurm.argv import export_option, probe_argv, step_argv
from servebench.providers.slurm.lease import warden_argv
from servebench.providers.slurm.spec import DEFAULT_EXPORT, SlurmProviderSpec
from servebench.providers.ssh import SshProvider
from servebench.providers.ssh.spec import SshProviderSpec
from tests.support.site_setup import SECRET, SETUP


def slurm_spec(**fields) -> SlurmProviderSpec:
    return SlurmProviderSpec.model_validate({"kind": "slurm", "nodes": 1, "cpus_per_node": 2,
                                             "time_limit": "10", **fields})


def ssh_spec(**fields) -> SshProviderSpec:
    return SshProviderSpec.model_validate({"kind": "ssh", "hosts": [{"name": "h1", "address": "10.0.0.1",
                                                                     "cpus": "0-1"}], **fields})


# ---------------------------------------------------------------------------- the fields

def test_the_fields_validate_and_a_campaign_without_them_keeps_its_normalized_spec():
    spec = slurm_spec(setup=["module load python/3.11"], env={"OMP_WAIT_POLICY": "passive", "N": 4})
    assert spec.env == {"OMP_WAIT_POLICY": "passive", "N": "4"} and spec.export == list(DEFAULT_EXPORT)
    for kind in (slurm_spec(), ssh_spec(), LocalProviderSpec.model_validate({"nodes": [{"name": "n", "cpus": [0]}]})):
        assert not {"setup", "env", "export"} & set(kind.model_dump()), kind.model_dump()
    assert {"setup", "env"} <= set(spec.model_dump()) and "export" in slurm_spec(export="all").model_dump()
    for bad in ({"setup": ["a\nb"]}, {"env": {"A-B": "x"}}, {"export": ["PATH,LD_PRELOAD"]}, {"export": "some"}):
        with pytest.raises(ValidationError):
            slurm_spec(**bad)


def test_the_prelude_runs_each_line_then_exports_env_and_a_failing_line_stops_the_command(tmp_path):
    prelude = tmp_path / "prelude.sh"
    prelude.write_text(prelude_text(["export SB_SITE=lmod", "SB_SITE=\"$SB_SITE-loaded\""], {"SB_TOKEN": SECRET}))
    done = subprocess.run(prelude_argv(str(prelude), ["sh", "-c", 'echo "$SB_SITE|$SB_TOKEN|$PATH"']),
                          capture_output=True, text=True, env={}, timeout=30)
    site, token, path = done.stdout.strip().split("|")
    assert done.returncode == 0 and (site, token) == ("lmod-loaded", SECRET) and path, done
    prelude.write_text(prelude_text(["true", "module load nowhere/1.0"], {}))
    done = subprocess.run(prelude_argv(str(prelude), ["echo", "not run"]), capture_output=True, text=True,
                          timeout=30)
    assert done.returncode == SETUP_FAILED_EXIT and "not run" not in done.stdout
    assert "provider.setup line 2 failed: module load nowhere/1.0" in done.stderr, done.stderr


# ---------------------------------------------------------------------------- the command lines

def test_ssh_commands_source_the_runs_prelude_and_carry_no_env_value():
    provider = SshProvider(ssh_spec(setup=SETUP, env={"SB_TOKEN": SECRET}), run_id="abcd1234")
    (host,) = provider.nodes()
    command = provider.command(host, ["python3", "-m", "server"])
    script = command[-1]   # ssh ... -- h1 "sh -c SCRIPT sh"
    assert provider.prelude == "/tmp/servebench-abcd1234/prelude.sh" and provider.prelude in script
    assert "sh -c" in script and PRELUDE_RUNNER.split(";")[0] in " ".join(command)
    assert SECRET not in " ".join(command) and "s3cret" not in " ".join(command)
    plain = SshProvider(ssh_spec(), run_id="abcd1234")
    assert "prelude" not in " ".join(plain.command(plain.nodes()[0], ["true"]))


def test_slurm_steps_export_the_policy_and_source_the_prelude():
    provider = SlurmProvider(slurm_spec(nodelist=["c1"], setup=SETUP, env={"SB_TOKEN": SECRET}), run_id="abcd1234")
    (node,) = provider.nodes()
    command = provider.command(node, ["python3", "-m", "server"])
    assert f"--export=HOME,USER,LOGNAME,LANG,TZ,PATH={DEFAULT_NODE_PATH}" in command
    assert "/tmp/servebench-abcd1234/prelude.sh" in command and SECRET not in " ".join(command)
    launched = command[command.index("--") + 1:]
    assert launched[launched.index("/tmp/servebench-abcd1234/prelude.sh") + 1:][:3] == ["taskset", "-c", "0-1"]
    # the probe and the lease's warden run before the prelude exists: the setup lines inline, no env
    python = provider.setup_python()
    assert python[:2] == ["sh", "-c"] and SETUP[0] in python[2] and python[-1] == "python3"
    assert SECRET not in " ".join(probe_argv(7, 1, 2, python, "/tmp", export_option(provider.spec.export)))
    warden = warden_argv(7, 1, python, "/tmp", 60, "/tmp/r", "--export=ALL")
    assert warden[warden.index("--") + 1:][:2] == ["sh", "-c"] and "--export=ALL" in warden


@pytest.mark.parametrize(("export", "option"), [
    ("all", "--export=ALL"),
    ("none", f"--export=PATH={DEFAULT_NODE_PATH}"),
    (["HOME", "PATH", "MODULEPATH"], "--export=HOME,PATH,MODULEPATH"),
    ([], f"--export=PATH={DEFAULT_NODE_PATH}"),
])
def test_srun_export_option_for_each_policy(export, option):
    assert export_option(export) == option
    assert option in step_argv(7, "c1", ["true"], "/tmp", export=option)


def test_local_nodes_get_env_in_their_environment_and_setup_through_sh(tmp_path):
    spec = LocalProviderSpec.model_validate({"nodes": [{"name": "n1", "cpus": [0]}], "setup": ["export SB_SITE=lmod"],
                                             "env": {"SB_TOKEN": SECRET}})
    provider = LocalProvider(spec, run_id="abcd1234")
    node = provider.nodes()[0]
    command = provider.command(node, ["sh", "-c", 'echo "$SB_SITE"'])
    assert command[:2] == ["sh", "-c"] and "export SB_SITE=lmod" in command[2] and SECRET not in " ".join(command)
    assert provider.run(node, ["sh", "-c", 'echo "$SB_SITE"'], timeout=30).stdout.strip() == "lmod"
    log = tmp_path / "env.log"
    process = provider.start(node, ["sh", "-c", 'echo "$SB_SITE|$SB_TOKEN"'], {}, log)
    try:
        deadline = time.monotonic() + 30
        while process.alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert process.exit_code() == 0
        assert log.read_text().strip() == f"lmod|{SECRET}"
    finally:
        provider.release()
    assert inline_setup_argv([], ["true"]) == ["true"]


# ---------------------------------------------------------------------------- over ssh, for real



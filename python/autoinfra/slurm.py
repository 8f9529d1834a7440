"""torch's env:// variables from Slurm's, so that `srun python train.py`
needs no launcher (docs/slurm.md).

    import autoinfra.slurm
    autoinfra.slurm.torch_env()      # before init_process_group("...", init_method="env://")

Under srun, every task has SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID and
the step's nodes (SLURM_STEP_NODELIST); torch wants RANK, WORLD_SIZE,
LOCAL_RANK, MASTER_ADDR and MASTER_PORT. Variables already set are kept,
so the same script runs under `autoinfra launch`, torchrun or srun.
"""
import os
import re

# torch's store port: every task of a step derives the same one from the
# job and step ids; this range stays clear of the runtime's own rendezvous
# ports (20000-31999) and of Linux's ephemeral ports (32768 up), where a
# task connecting before rank 0 listens could connect to itself.
PORT_BASE, PORT_SPAN = 10000, 10000


def hostlist_first(nodelist):
    """The first host of a Slurm hostlist: "gpu[003-010,012],x" -> "gpu003"."""
    m = re.match(r"([^,\[]+)(?:\[(\d+)[^\]]*\]([^,\[]*))?", nodelist or "")
    if not m or (m.group(2) is None and "[" in nodelist.split(",")[0]):
        raise ValueError("Slurm hostlist %r is not one this parser reads: set MASTER_ADDR" % nodelist)
    return m.group(1) + (m.group(2) or "") + (m.group(3) or "")


def torch_env(environ=None):
    """Set RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT from
    Slurm's variables where unset. Returns True if it read Slurm's."""
    env = os.environ if environ is None else environ
    if "SLURM_PROCID" not in env or "SLURM_NTASKS" not in env:
        return False
    env.setdefault("RANK", env["SLURM_PROCID"])
    env.setdefault("WORLD_SIZE", env["SLURM_NTASKS"])
    env.setdefault("LOCAL_RANK", env.get("SLURM_LOCALID", "0"))
    nodes = env.get("SLURM_STEP_NODELIST", env.get("SLURM_JOB_NODELIST", ""))
    multi = int(env.get("SLURM_STEP_NUM_NODES", env.get("SLURM_NNODES", "1"))) > 1
    env.setdefault("MASTER_ADDR", hostlist_first(nodes) if multi else "127.0.0.1")
    job = int(env.get("SLURM_JOB_ID", "0"))
    step = int(env.get("SLURM_STEP_ID", "0"))
    env.setdefault("MASTER_PORT", str(PORT_BASE + (job * 131 + step) % PORT_SPAN))
    return True

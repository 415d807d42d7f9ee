"""Starting a round's training processes, and saying which one failed.

On one node ``accelerate launch`` starts them (one per GPU, or CPU processes over gloo). On several nodes the round is
one SLURM job of ``nodes`` nodes whose batch script runs on the first node: it starts one ``accelerate launch`` per
node with ``srun`` (this module's ``__main__``), each with its machine rank, and a c10d rendezvous on the first node.
Each training process records how it ended in a folder beside the output (``record_rank``), so that a failure names
the rank and host that ended first, or without a word (killed, out of memory, its node lost)."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

from snakeskills.errors import SnakeskillsError

logger = logging.getLogger(__name__)

# how long the processes launch_training started get to end after a stop signal before they are killed: torch's
# launcher waits LAUNCHED_GRACE_SECONDS for its training processes (then kills them), this job a few seconds more
LAUNCHED_GRACE_SECONDS = 15


class LaunchFailed(SnakeskillsError):
    """The training processes failed; the message names the one that ended first (``failure``)."""


def records_dir_for(output_dir: str | Path) -> Path:
    """Where the training processes of a model saved to ``output_dir`` record how they ended: ``.<name>-ranks``."""
    output_dir = Path(output_dir)
    return output_dir.parent / f".{output_dir.name}-ranks"


def accelerate_command(
    module: str,
    argument: str,
    *,
    processes: int,
    nodes: int = 1,
    machine_rank: int = 0,
    main_address: str = "127.0.0.1",
    port: int,
) -> list[str]:
    """``accelerate launch`` of ``module``'s ``__main__`` with ``argument``, ``processes`` processes on this node of
    ``nodes`` (this one's ``machine_rank``), meeting at ``main_address:port`` (the first node's)."""
    command = [sys.executable, "-m", "accelerate.commands.launch", "--num_processes", str(processes * nodes)]
    command += ["--num_machines", str(nodes), "--main_process_port", str(port), "--mixed_precision", "no"]
    if nodes > 1:
        command += ["--machine_rank", str(machine_rank), "--main_process_ip", main_address]
    # --multi_gpu starts the processes with torch.distributed.run (accelerate's --cpu alone starts one, or
    # needs mpirun); on a CPU run each one's Trainer then trains on the CPU and talks over gloo
    command += ["--dynamo_backend", "no", "--multi_gpu"]
    return command + ["-m", module, argument]


def srun_command(nodes: int, cpus_per_node: int) -> list[str]:
    """``srun`` starting one task per node on ``nodes`` nodes of this SLURM job, each with ``cpus_per_node`` CPUs
    and the job's memory and GPUs on its node (a step gets the job's GPUs unless it names others); when one task
    fails, SLURM ends the others (``--kill-on-bad-exit``)."""
    command = ["srun", f"--nodes={nodes}", f"--ntasks={nodes}", "--ntasks-per-node=1"]
    return command + [f"--cpus-per-task={cpus_per_node}", "--mem=0", "--kill-on-bad-exit=1", "--export=ALL"]


def free_port() -> int:
    """A port free on every address of this node, for the processes' rendezvous."""
    with socket.socket() as sock:
        sock.bind(("", 0))
        return sock.getsockname()[1]


def check_slurm_job(nodes: int) -> None:
    """A round across ``nodes`` nodes runs as one SLURM job of that many nodes (``--profile slurm``)."""
    if nodes > 1 and (not os.environ.get("SLURM_JOB_ID") or shutil.which("srun") is None):
        raise SnakeskillsError(
            f"config key training.nodes is {nodes}: a round across several nodes runs as one SLURM job of {nodes} "
            "nodes (snakemake --profile slurm), which starts the training on each with srun; this job runs outside "
            "SLURM (no SLURM_JOB_ID or no srun here)"
        )


def launch_training(
    module: str,
    arguments: dict,
    *,
    processes: int,
    nodes: int = 1,
    cpus_per_node: int = 1,
    output_dir: str | Path,
    log_path: str | Path,
) -> dict:
    """Run ``module``'s ``__main__`` (``arguments`` as one JSON argument, plus ``records``: the folder each process
    records how it ended in) in ``processes`` processes on each of ``nodes`` nodes; their output is appended to
    ``log_path``. Returns the metrics the main process saved with the model in ``output_dir``.

    The launcher (``accelerate launch``, or ``srun`` on several nodes) runs in a session of its own, so that a stop
    signal reaches the training processes through this process only, once: interrupted
    (``trainer.stop_signals_interrupt``), this process sends the launcher the same signal (SIGTERM to ``srun``, which
    takes a single SIGINT for a status request) and waits for the processes to end (``stop_launched``) before the
    interruption goes on. A failure raises ``LaunchFailed`` naming the process that ended first (``failure``) and
    what the launcher said last; where no process started at all, the processes are launched once more first (on
    another port) and only a second such failure raises."""
    check_slurm_job(nodes)
    records = records_dir_for(output_dir)
    where = "one node" if nodes == 1 else f"{nodes} nodes"
    for attempt in (1, 2):
        shutil.rmtree(records, ignore_errors=True)
        records.mkdir(parents=True)
        argument = json.dumps({**arguments, "records": str(records)})
        command, shown = _launch_command(module, argument, processes, nodes, cpus_per_node)
        logger.info("launching %d training processes on %s: %s", processes * nodes, where, " ".join(shown))
        with open(log_path, "a", encoding="utf-8") as log:
            written = log.tell()
        returncode = _run_launcher(command, log_path, nodes)
        if returncode == 0:
            break
        said = launcher_words(log_path, written)
        if attempt == 1 and not any(records.glob("rank-*.json")):
            # no training process started: the launch itself failed (a rendezvous port taken in the meantime, a
            # node slow to answer), which a second launch on another port gets past; a real mistake fails again
            logger.warning(
                "no training process started (launcher exit %d%s); launching them once more",
                returncode,
                f": {said}" if said else "",
            )
            continue
        raise LaunchFailed(
            f"the {processes * nodes} training processes on {where} failed (exit {returncode}): "
            f"{failure(records, processes, nodes)}{f' (the launcher said: {said})' if said else ''}; see {log_path}"
        )
    shutil.rmtree(records, ignore_errors=True)
    return json.loads((Path(output_dir) / "training_metrics.json").read_text())


def _launch_command(module: str, argument: str, processes: int, nodes: int, cpus_per_node: int):
    """The command that starts the training processes (``accelerate launch`` on one node, ``srun`` of this module's
    ``node_main`` on several), meeting at a free port of this node; and the part of it the log shows."""
    port = free_port()
    if nodes == 1:
        command = accelerate_command(module, argument, processes=processes, port=port)
        return command, command[:-1]  # the round's JSON left out
    node_launch = {"module": module, "argument": argument, "processes": processes, "nodes": nodes, "port": port}
    node_launch["first_node"] = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
    shown = srun_command(nodes, cpus_per_node)
    return shown + [sys.executable, "-m", __name__, json.dumps(node_launch)], shown


def _run_launcher(command: list[str], log_path: str | Path, nodes: int) -> int:
    """Run the launcher ``command`` in a session of its own, its output appended to ``log_path``; its exit status.
    A stop signal ends the training processes with it (``stop_launched``) and goes on."""
    from snakeskills.training.trainer import stop_signal_of

    # torch.distributed.run passes a stop signal on to the training processes and kills them after this long (srun
    # hands the variable on to each node's launcher)
    environment = {"TORCH_ELASTIC_SHUTDOWN_TIMEOUT": str(LAUNCHED_GRACE_SECONDS), **os.environ}
    with open(log_path, "a", encoding="utf-8") as log:
        launcher = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, env=environment, start_new_session=True
        )
        try:
            return launcher.wait()
        except BaseException as stopped:  # a stop signal (or anything else): the processes end with this one
            import signal

            stop_launched(launcher, signal.SIGTERM if nodes > 1 else stop_signal_of(stopped))
            raise


# an exception's last line ("ValueError: ..."); torch's elastic launcher's own summary of a child's failure says
# less than the child did
EXCEPTION_LINE = re.compile(r"^[\w.]*(Error|Exception|Interrupt)\b:\s*\S")
SUMMARY_LINE = re.compile(r"ChildFailedError")


def launcher_words(log_path: str | Path, start: int) -> str:
    """What a failed launch said, from offset ``start`` of its log ``log_path``: its last exception's line (a
    training process's own before torch's summary of it), else its last line; empty where it wrote nothing."""
    with contextlib.suppress(OSError), open(log_path, encoding="utf-8", errors="replace") as log:
        log.seek(start)
        lines = [line.strip() for line in log.read().splitlines() if line.strip()]
        errors = [line for line in lines if EXCEPTION_LINE.search(line) and not SUMMARY_LINE.search(line)]
        said = (errors or lines or [""])[-1]
        return said if len(said) <= 300 else said[:300] + "..."
    return ""


def stop_launched(launcher, signum: int, grace_seconds: float = LAUNCHED_GRACE_SECONDS + 5) -> None:
    """End the processes ``launch_training`` started: ``signum`` to ``launcher`` (a Popen), which passes it on to each
    training process and waits for them (the main one logs its interruption line), then SIGKILL to the launcher and
    to each process that was under it, whichever still runs ``grace_seconds`` later."""
    import signal
    import time

    import psutil

    try:
        started = psutil.Process(launcher.pid).children(recursive=True)
    except psutil.NoSuchProcess:  # it has ended, its training processes before it
        started = []
    name = signal.Signals(signum).name
    logger.warning(
        "stopping the %d training processes: %s to their launcher (pid %d)", len(started), name, launcher.pid
    )
    deadline = time.monotonic() + grace_seconds
    launcher.send_signal(signum)
    with contextlib.suppress(subprocess.TimeoutExpired):
        launcher.wait(timeout=grace_seconds)
    _ended, running = psutil.wait_procs(started, timeout=max(0.0, deadline - time.monotonic()))
    if launcher.poll() is None or running:
        logger.warning("killing the training processes still running %gs after %s", grace_seconds, name)
        launcher.kill()
        for process in running:
            with contextlib.suppress(psutil.NoSuchProcess):
                process.kill()
    launcher.wait()


# ---------------------------------------------------------------- how each process ended


def this_process() -> dict:
    """This training process's place: its rank, the node's rank and name, its local rank (torch.distributed.run's
    variables)."""
    environment = os.environ
    return {
        "rank": int(environment.get("RANK", "0")),
        "node_rank": int(environment.get("GROUP_RANK", "0")),
        "local_rank": int(environment.get("LOCAL_RANK", "0")),
        "host": socket.gethostname(),
        "pid": os.getpid(),
    }


def record_rank(records: str | Path | None, status: str, error: str | None = None) -> None:
    """Record this process's ``status`` (started, done, failed, interrupted) and its ``error`` in ``records``."""
    if records is None:
        return
    record = {**this_process(), "status": status, "error": error}
    path = Path(records) / f"rank-{record['rank']}.json"
    staging = path.with_suffix(".tmp")
    staging.write_text(json.dumps(record))
    staging.replace(path)


def failure(records: str | Path, processes: int, nodes: int) -> str:
    """What the records in ``records`` say of a failed run of ``processes`` x ``nodes`` processes: the ranks that
    ended without a word (killed by a signal or for memory, or their node lost) first, then those that failed with an
    error (often because the first ones went), then those that never started."""
    found = {}
    for path in Path(records).glob("rank-*.json"):
        with contextlib.suppress(ValueError, OSError):
            record = json.loads(path.read_text())
            found[record["rank"]] = record
    silent, missing, failed = [], [], {}  # failed: the ranks of each error
    for rank in range(processes * nodes):
        record = found.get(rank)
        if record is None:
            missing.append(f"rank {rank} (node rank {rank // processes})")
        elif record["status"] == "started":
            silent.append(f"rank {rank} on {record['host']} (node rank {record['node_rank']})")
        elif record["status"] == "failed":
            place = f"rank {rank} on {record['host']} (node rank {record['node_rank']})"
            failed.setdefault(record["error"], []).append(place)
    parts = []
    if silent:
        parts.append(
            f"training process {', '.join(silent)} ended without a word (killed by a signal or for memory, or its "
            "node was lost)"
        )
    if failed:
        errors = "; ".join(f"{', '.join(places)}: {error}" for error, places in failed.items())
        parts.append(f"then {errors}" if silent else errors)
    if missing:
        parts.append(f"{', '.join(missing)} never started")
    return "; ".join(parts) or "every process ended, none with an error of its own"


# ---------------------------------------------------------------- one node's launcher (srun starts it on each node)


def node_main(argument: str) -> int:
    """Start this node's training processes (``accelerate launch`` with this node's rank, ``SLURM_NODEID``), meeting
    the other nodes' at the first node's address (``SLURM_LAUNCH_NODE_IPADDR``: where ``srun`` ran, the job's batch
    script's node); returns their launcher's exit status. SIGINT and SIGTERM are passed on to it."""
    import signal

    launch = json.loads(argument)
    nodes, processes = launch["nodes"], launch["processes"]
    node_rank, host = int(os.environ["SLURM_NODEID"]), socket.gethostname()
    if node_rank == 0 and os.environ.get("SLURMD_NODENAME", host) != launch["first_node"]:
        logger.error(
            "node %s has node rank 0, but the rendezvous is on %s, where srun ran: SLURM numbered this job step's "
            "nodes otherwise",
            host,
            launch["first_node"],
        )
        return 1
    address = os.environ["SLURM_LAUNCH_NODE_IPADDR"]
    first, last = node_rank * processes, (node_rank + 1) * processes - 1
    logger.info(
        "node %s (node rank %d of %d): training processes rank %d to %d, rendezvous at %s:%d (%s)",
        host,
        node_rank,
        nodes,
        first,
        last,
        address,
        launch["port"],
        launch["first_node"],
    )
    command = accelerate_command(
        launch["module"],
        launch["argument"],
        processes=processes,
        nodes=nodes,
        machine_rank=node_rank,
        main_address=address,
        port=launch["port"],
    )
    launcher = subprocess.Popen(command)  # its environment holds launch_training's TORCH_ELASTIC_SHUTDOWN_TIMEOUT
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda number, _frame: launcher.send_signal(number))
    returncode = launcher.wait()
    if returncode != 0:
        logger.error("node %s (node rank %d): its training processes failed (exit %d)", host, node_rank, returncode)
    return returncode


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s: %(message)s")
    sys.exit(node_main(sys.argv[1]))

"""The code judge's sandbox (judge.sandbox: bwrap), tried as a hostile model would: programs that fake a pass, read
the answers, write outside their folder, read the judge's secrets, reach the network, outlive their verdict, attack
the judge, flood it, leave files behind or hold more processes than allowed. Every program goes through the real
judge command (``python -m snakeskills.cli judge``, what rules/judge.smk runs), all in one chunk, beside honest
answers that must still pass. The attacks are bounded (a few MB, at most 100 short-lived processes, seconds).

Only the sandbox runs them: without it (judge.sandbox: none) several would harm this machine (kill -1 as root), so
today's unsandboxed behaviour is shown by the tests of the fake passes and the call-based values, which hold there
too (test_code_benchmarks.py), not here.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import sysconfig
import threading
import time
from pathlib import Path

import pytest
from test_code_benchmarks import running_with_argument

from snakeskills.errors import SnakeskillsError
from snakeskills.judging.code_execution import call_cases
from snakeskills.sandbox import containment as sandbox

pytestmark = pytest.mark.usefixtures("bubblewrap")

SECRET = "judge-secret-7f3a9c"
ADD_TESTS = "assert add(1, 2) == 3\nassert add(-4, 4) == 0\n"
# a stdin program that found the judge's rows prints the expected output of the case it is given
FIND_OUTPUT = (
    "n = int(input())\n"
    "found = [c['output'] for r in rows if 'test_cases' in r for c in r['test_cases'] if c['input'] == f'{n}\\n']\n"
    "print(found[0])"
)
DOUBLE_CASES = [{"input": "3\n", "output": "6\n"}, {"input": "-4\n", "output": "-8\n"}]
# A program that looks for the judge job's secret (planted in its environment, its home folder and its working
# folder) everywhere it can reach: every process's environment, command line, working and root folder it can see,
# its own environment, and every file it can read outside /proc, /sys, /dev and the system's and the interpreter's
# (read-only) folders. It names what it found in its one-line error, or says it found nothing.
SECRET_SEARCH = f"""\
import os, sys
secret = bytes.fromhex({SECRET.encode().hex()!r})  # not in the program's text
found = [key for key, value in os.environ.items() if secret in (key + value).encode()]
def look(path):
    try:
        with open(path, 'rb') as file:
            if secret in file.read(1 << 20):
                found.append(path)
    except OSError:
        pass
def walk(top, skip=()):
    for folder, folders, files in os.walk(top):
        folders[:] = [name for name in folders if os.path.join(folder, name) not in skip][:50]
        for name in files[:200]:
            look(os.path.join(folder, name))
for pid in [name for name in os.listdir('/proc') if name.isdigit()]:
    for name in ('environ', 'cmdline'):
        look(f'/proc/{{pid}}/{{name}}')
    for name in ('cwd', 'root'):
        if os.path.realpath(f'/proc/{{pid}}/{{name}}') != '/':
            walk(f'/proc/{{pid}}/{{name}}')
system = {{'/proc', '/sys', '/dev', '/usr', '/bin', '/sbin', '/lib', '/lib32', '/lib64', sys.prefix, sys.base_prefix}}
walk('/', skip=system)
raise ValueError('found ' + ' '.join(found)[:200] if found else 'found nothing')
"""


class Listener:
    """A TCP server on localhost that records whoever connects."""

    def __init__(self):
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.connections = 0
        self.server.settimeout(0.2)
        self.stopped = False
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self):
        while not self.stopped:
            try:
                connection, _ = self.server.accept()
            except TimeoutError:
                continue
            self.connections += 1
            connection.close()

    def close(self):
        self.stopped = True
        self.thread.join()
        self.server.close()


def hostile_rows(outside: Path, input_path: Path, port: int, marker: str) -> dict[str, dict]:
    """Rows by name: a program (the generation) and what it is judged against."""
    site = sysconfig.get_paths()["purelib"]
    tests = {"tests": ADD_TESTS}
    cases = {"test_cases": DOUBLE_CASES}
    programs = {
        # honest answers
        "honest tests": (tests, "def add(a, b):\n    return a + b"),
        "honest cases": (cases, "print(2 * int(input()))"),
        "honest calls": (
            {"call_cases": call_cases("twice", [[3], [-4]], [6, -8])},
            "def twice(n):\n    return 2 * n",
        ),
        # fake passes: status 0 before the tests ran
        "sys.exit(0)": (tests, "import sys\n\n\ndef add(a, b):\n    return 0\n\n\nsys.exit(0)"),
        "os._exit(0)": (tests, "import os\n\n\ndef add(a, b):\n    os._exit(0)"),
        "SystemExit": (tests, "def add(a, b):\n    raise SystemExit(0)"),
        "atexit": (tests, "import atexit, os\n\natexit.register(os._exit, 0)\n\n\ndef add(a, b):\n    return 0"),
        "tests via __file__": (
            tests,
            "import re\n\n\ndef add(a, b):\n    return int(re.findall(r'== (-?\\d+)', open(__file__).read())[0])",
        ),
        "lying __eq__": (
            {"call_cases": call_cases("twice", [[3]], [6])},
            "class Equal:\n    def __eq__(self, other):\n        return True\n\n\ndef twice(n):\n    return Equal()",
        ),
        # reading the answers
        "answers from the input file": (
            cases,
            f"import json\nrows = [json.loads(line) for line in open({str(input_path)!r})]\n" + FIND_OUTPUT,
        ),
        "answers from the parent's command line": (
            cases,
            "import json, os\n"
            "arguments = open(f'/proc/{os.getppid()}/cmdline', 'rb').read().split(b'\\0')\n"
            "path = arguments[arguments.index(b'--input') + 1].decode()\n"
            "rows = [json.loads(line) for line in open(path)]\n" + FIND_OUTPUT,
        ),
        # writing outside its folder
        "write outside": (tests, f"open({str(outside / 'written.txt')!r}, 'w').write('x')"),
        "change a judged file": (tests, f"open({str(outside / 'judged.jsonl')!r}, 'w').write('flipped')"),
        "a .pth in site-packages": (tests, f"open({os.path.join(site, 'snakeskills_probe.pth')!r}, 'w').write('')"),
        "remove a judged file": (tests, f"import os\nos.remove({str(outside / 'judged.jsonl')!r})"),
        # the judge's secrets
        "secrets": (tests, SECRET_SEARCH),
        # the network
        "network": (tests, f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=2)"),
        # outliving the verdict
        "double fork": (
            tests,
            "import os\n"
            "if os.fork() == 0:\n"
            "    os.setsid()\n"
            "    if os.fork() == 0:\n"
            f"        os.execvp('sleep', ['sleep', {marker!r}])\n"
            "    os._exit(0)\n"
            "os.wait()\n"
            "def add(a, b):\n    return a + b",
        ),
        "files in /tmp and /dev/shm": (
            tests,
            f"open('/tmp/snakeskills-probe-{marker}', 'w').write('x')\n"
            f"open('/dev/shm/snakeskills-probe-{marker}', 'w').write('x')\n"
            "def add(a, b):\n    return a + b",
        ),
        # attacks on the judge
        "kill the parent": (tests, "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)"),
        "kill everything": (tests, "import os, signal\nos.kill(-1, signal.SIGKILL)"),
        "stop the group": (tests, "import os, signal\nos.killpg(0, signal.SIGSTOP)"),
        "a FIFO for its output": (cases, "import os\nos.mkfifo('stdout.txt')\nprint(2 * int(input()))"),
        "a flood on stderr": (tests, "import sys\nwhile True:\n    sys.stderr.write('x' * 1000000)"),
        "a grandchild holding stderr": (
            tests,
            "import subprocess, sys\n"
            f"subprocess.Popen(['sleep', {marker + '1'!r}], stderr=sys.stderr)\n"
            "def add(a, b):\n    return a + b",
        ),
        "a folder it cannot remove": (
            tests,
            "import os, subprocess\n"
            "os.makedirs('d/e')\nopen('d/e/f', 'w').write('x')\n"
            "subprocess.run(['chattr', '+i', 'd/e/f'], capture_output=True)\n"
            "os.chmod('d/e', 0)\nos.chmod('d', 0o500)\n"
            "def add(a, b):\n    return a + b",
        ),
        "memory in many processes": (
            tests,
            "import subprocess, sys\n"
            "hold = 'b = bytearray(400 * 1024 * 1024); import time; time.sleep(2)'\n"
            "held = [subprocess.Popen([sys.executable, '-c', hold]) for _ in range(4)]\n"
            "raise SystemExit(str([process.wait() for process in held]))",
        ),
        "many processes": (
            tests,
            "import subprocess\n"
            "started = []\n"
            "try:\n"
            "    for _ in range(100):\n"
            "        started.append(subprocess.Popen(['sleep', '3']))\n"
            "except OSError:\n"
            "    pass\n"
            "raise SystemExit(f'started {len(started)}')",
        ),
    }
    return {
        name: {"id": name, "problem": name, **checked, "generation": f"```python\n{program}\n```"}
        for name, (checked, program) in programs.items()
    }


@pytest.fixture(scope="module")
def hostile_judged(tmp_path_factory):
    """Every hostile row judged in one chunk by the judge command under bubblewrap, and what was around it."""
    folder = tmp_path_factory.mktemp("hostile")
    outside = folder / "outside"
    outside.mkdir()
    (outside / "judged.jsonl").write_text("original")
    input_path = folder / "chunk.jsonl"
    listener = Listener()
    marker = f"{time.time_ns() % 10**9}.25"
    rows = hostile_rows(outside, input_path, listener.port, marker)
    input_path.write_text("".join(json.dumps(row) + "\n" for row in rows.values()))
    settings = {"extraction": "code", "timeout_seconds": 5, "memory_limit_mb": 1024, "sandbox": "bwrap"}
    shared_tmp = folder / "tmp"  # the judge's TMPDIR, shared like /tmp: its mode must survive every cleanup
    shared_tmp.mkdir()
    shared_tmp.chmod(0o1777)
    # the job's secrets: keys in its environment (an LLM judge's, an API teacher's), files in its home and folder
    secrets = {"SNAKESKILLS_PROBE_SECRET": SECRET, "OPENAI_API_KEY": SECRET}
    home, working = folder / "home", folder / "working"
    for place in (home, working):
        place.mkdir()
        (place / ".netrc").write_text(f"machine api.example.com password {SECRET}\n")
    started = time.monotonic()
    process = subprocess.run(
        [sys.executable, "-m", "snakeskills.cli", "judge", "--settings-json", json.dumps(settings), "--threads", "2"]
        + ["--input", str(input_path), "--output", str(folder / "judged.jsonl"), "--log", str(folder / "judge.log")],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **secrets, "HOME": str(home), "TMPDIR": str(shared_tmp)},
        cwd=working,
    )
    elapsed = time.monotonic() - started
    time.sleep(0.3)
    listener.close()
    judged = {}
    if process.returncode == 0:
        judged = {row["id"]: row for row in map(json.loads, (folder / "judged.jsonl").read_text().splitlines())}
    written = [
        path
        for path in folder.rglob("*")
        if path.is_file() and path.parent not in (home, working) and SECRET in path.read_text(errors="replace")
    ]
    yield {
        "written with the secret": written,
        "shared_tmp": shared_tmp,
        "rows": rows,
        "process": process,
        "judged": judged,
        "elapsed": elapsed,
        "outside": outside,
        "connections": listener.connections,
        "marker": marker,
        "log": (folder / "judge.log").read_text() if (folder / "judge.log").exists() else "",
    }
    for name in (f"/tmp/snakeskills-probe-{marker}", f"/dev/shm/snakeskills-probe-{marker}"):
        Path(name).unlink(missing_ok=True)
    Path(sysconfig.get_paths()["purelib"], "snakeskills_probe.pth").unlink(missing_ok=True)


def verdict(hostile_judged, name: str) -> tuple[str, str | None]:
    row = hostile_judged["judged"][name]
    return row["execution_status"], row["execution_error"]


def test_the_judge_survives_every_program_and_judges_every_row(hostile_judged):
    process = hostile_judged["process"]
    assert process.returncode == 0, process.stderr[-3000:]
    assert len(hostile_judged["judged"]) == len(hostile_judged["rows"])
    assert hostile_judged["elapsed"] < 120, "no program blocks the judge past its limits"
    assert "sandbox bwrap" in hostile_judged["log"]


def test_honest_answers_pass(hostile_judged):
    for name in ("honest tests", "honest cases", "honest calls"):
        assert verdict(hostile_judged, name) == ("passed", None), name


@pytest.mark.parametrize(
    ("name", "error"),
    [
        ("sys.exit(0)", "exited before its tests finished (status 0 without the harness's proof)"),
        ("os._exit(0)", "exited before its tests finished (status 0 without the harness's proof)"),
        ("SystemExit", "exited before its tests finished (status 0 without the harness's proof)"),
        ("atexit", "exited before its tests finished (status 0 without the harness's proof)"),
        ("tests via __file__", "FileNotFoundError: [Errno 2] No such file or directory: 'solution.py'"),
        ("lying __eq__", "TypeError: Object of type Equal is not JSON serializable"),
    ],
)
def test_a_fake_pass_fails(hostile_judged, name, error):
    assert verdict(hostile_judged, name) == ("failed", error)


def test_the_answers_are_out_of_reach(hostile_judged):
    status, error = verdict(hostile_judged, "answers from the input file")
    assert status == "failed" and "No such file or directory" in error
    status, error = verdict(hostile_judged, "answers from the parent's command line")
    assert status == "failed" and "ValueError" in error, "the parent it sees is the sandbox's, without --input"


def test_nothing_outside_its_folder_changes(hostile_judged):
    outside = hostile_judged["outside"]
    assert sorted(path.name for path in outside.iterdir()) == ["judged.jsonl"]
    assert (outside / "judged.jsonl").read_text() == "original"
    assert not Path(sysconfig.get_paths()["purelib"], "snakeskills_probe.pth").exists()
    for name in ("write outside", "change a judged file", "a .pth in site-packages", "remove a judged file"):
        status, error = verdict(hostile_judged, name)
        assert status == "failed" and ("No such file or directory" in error or "Read-only file system" in error), (
            name,
            error,
        )


def test_the_judges_secrets_stay_out(hostile_judged):
    """Nothing of the judge job's environment, home or folder is readable inside: bubblewrap's own process, the
    first one in the sandbox, starts with an environment of its own, not the job's."""
    assert os.environ.get("SNAKESKILLS_PROBE_SECRET") is None
    assert verdict(hostile_judged, "secrets") == ("failed", "ValueError: found nothing")
    process = hostile_judged["process"]
    assert SECRET not in process.stdout + process.stderr + hostile_judged["log"]
    assert hostile_judged["written with the secret"] == [], "nothing the job wrote holds the secret"


def test_no_network(hostile_judged):
    assert hostile_judged["connections"] == 0
    status, error = verdict(hostile_judged, "network")
    assert status == "failed" and ("Connection refused" in error or "unreachable" in error), error


def test_nothing_outlives_its_verdict(hostile_judged):
    marker = hostile_judged["marker"]
    assert running_with_argument(marker) == [] and running_with_argument(marker + "1") == []
    assert verdict(hostile_judged, "double fork") == ("passed", None), "its tests passed; its daemon died with it"
    assert verdict(hostile_judged, "a grandchild holding stderr") == ("passed", None)
    assert verdict(hostile_judged, "files in /tmp and /dev/shm") == ("passed", None)
    assert not Path(f"/tmp/snakeskills-probe-{marker}").exists()
    assert not Path(f"/dev/shm/snakeskills-probe-{marker}").exists()


def test_attacks_on_the_judge_hit_only_the_program(hostile_judged):
    for name in ("kill the parent", "kill everything", "stop the group"):
        status, _ = verdict(hostile_judged, name)
        assert status in ("failed", "timed out"), name
    assert verdict(hostile_judged, "a FIFO for its output") == ("passed", None), "its output is not in its folder"
    status, error = verdict(hostile_judged, "a flood on stderr")
    assert status == "failed" and len(error) <= 300, "the file size limit stops it; the judge reads only a tail"
    assert verdict(hostile_judged, "a folder it cannot remove") == ("passed", None)
    shared_tmp = hostile_judged["shared_tmp"]
    assert oct(shared_tmp.stat().st_mode & 0o7777) == oct(0o1777), "cleanup never touches the folder above a run's"
    assert list(shared_tmp.iterdir()) == [], "every run's folders are removed"


def test_processes_and_their_memory_are_capped_per_run(hostile_judged):
    """64 processes (cgroup pids.max, or RLIMIT_NPROC in its user namespace); memory_limit_mb in total (a cgroup:
    four processes of 400 MB each under 1024 MB cannot all live)."""
    status, error = verdict(hostile_judged, "many processes")
    started = int(error.removeprefix("started "))
    assert status == "failed" and 0 < started < 64, error
    if not sandbox.cgroups_available():
        pytest.skip("no writable cgroup here: memory is capped per process only")
    status, error = verdict(hostile_judged, "memory in many processes")
    assert status == "failed" and "-9" in error, error


# ---------------------------------------------------------------- failing closed


def test_without_bubblewrap_the_judge_stops_saying_how_to_install_it_or_opt_out(tmp_path):
    row = {"id": "p", "problem": "p", "tests": ADD_TESTS, "generation": "def add(a, b):\n    return a + b"}
    (tmp_path / "chunk.jsonl").write_text(json.dumps(row) + "\n")
    settings = {"extraction": "code", "timeout_seconds": 5, "memory_limit_mb": 1024, "sandbox": "bwrap"}
    process = subprocess.run(
        [sys.executable, "-m", "snakeskills.cli", "judge", "--settings-json", json.dumps(settings), "--threads", "1"]
        + ["--input", str(tmp_path / "chunk.jsonl"), "--output", str(tmp_path / "out.jsonl")]
        + ["--log", str(tmp_path / "judge.log")],
        capture_output=True,
        text=True,
        env={**os.environ, "PATH": str(tmp_path)},  # no bwrap on it
    )
    assert process.returncode != 0 and not (tmp_path / "out.jsonl").exists()
    message = process.stderr.strip().splitlines()[-1]
    assert "config key judge.sandbox is 'bwrap', but bubblewrap (bwrap) is not installed on this node" in message
    assert "apt-get install bubblewrap" in message and "judge.sandbox: none" in message


def test_the_plan_stops_before_any_job_without_bubblewrap(monkeypatch):
    import yaml
    from conftest import DEFAULT_CONFIG, checked_config

    from snakeskills.plan.checks import check_code_sandbox

    config = yaml.safe_load(DEFAULT_CONFIG.read_text())
    check_code_sandbox(checked_config(config))  # no code benchmark: nothing to check
    config = yaml.safe_load(DEFAULT_CONFIG.read_text())
    config["benchmarks"]["humaneval"] = {"preset": "humaneval", "hf": {"path": "/data/humaneval"}}
    config = checked_config(config)
    check_code_sandbox(config)  # bubblewrap is here
    monkeypatch.setattr(sandbox.shutil, "which", lambda name: None)
    sandbox.sandbox_problem.cache_clear()
    try:
        with pytest.raises(SnakeskillsError, match=r"config key judge\.sandbox is 'bwrap', but bubblewrap"):
            check_code_sandbox(config)
        config["judge"]["sandbox"] = "none"
        check_code_sandbox(config)  # the explicit way out
    finally:
        sandbox.sandbox_problem.cache_clear()


def judged_in_the_sandbox_by(python: Path) -> subprocess.CompletedProcess:
    """A program that checks it runs in a venv, judged in the sandbox by a judge that ``python`` (a venv's) runs;
    it prints the verdict."""
    script = (
        "from snakeskills.sandbox.containment import sandbox_problem\n"
        "from snakeskills.judging.code_execution import ProgramCheck, run_check\n"
        "assert sandbox_problem('bwrap') is None, sandbox_problem('bwrap')\n"
        "check = ProgramCheck('import sys\\nassert sys.prefix.endswith(\"venv\"), sys.prefix\\n')\n"
        "print(run_check(check, timeout_seconds=10, memory_limit_mb=1024).status)\n"
    )
    return subprocess.run([str(python), "-c", script], capture_output=True, text=True)


def test_a_judge_in_a_venv_under_tmp_runs_programs_in_the_sandbox(tmp_path):
    """A new user's venv in /tmp (the sandbox's /tmp is private): its folder stays visible, read-only."""
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(tmp_path / "venv")])
    process = judged_in_the_sandbox_by(tmp_path / "venv/bin/python")
    assert process.stdout.strip() == "passed", process.stderr[-2000:]


def test_a_judge_whose_python_is_reached_through_a_link_runs_programs_in_the_sandbox(tmp_path):
    """A venv whose path goes through a link (a home or project folder linked into a parallel file system): the
    sandbox mounts resolved folders, so the interpreter is started by its resolved folder, keeping the venv's."""
    real = tmp_path / "parallel-fs" / "project"
    real.mkdir(parents=True)
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(real / "venv")])
    (tmp_path / "project").symlink_to(real)
    process = judged_in_the_sandbox_by(tmp_path / "project" / "venv" / "bin" / "python")
    assert process.stdout.strip() == "passed", process.stderr[-2000:]


def test_a_sandbox_that_cannot_start_says_what_failed_not_to_turn_it_off(monkeypatch):
    """bubblewrap installed and working, but the probe's interpreter missing inside: the message quotes the probe's
    own error, does not blame user namespaces, and names judge.sandbox: none only last, as a last resort."""
    monkeypatch.setattr(sandbox, "sandbox_python", lambda: "/nonexistent/venv/bin/python")
    sandbox.sandbox_problem.cache_clear()
    try:
        with pytest.raises(SnakeskillsError) as raised:
            sandbox.check_sandbox("bwrap")
    finally:
        sandbox.sandbox_problem.cache_clear()
    message = str(raised.value)
    assert "/nonexistent/venv/bin/python" in message and "No such file or directory" in message, message
    assert "namespace" not in message and "install bubblewrap" not in message, message
    assert message.index("judge.sandbox: none") > message.index("No such file or directory")
    assert "throwaway container" in message


def test_removing_a_run_folder_never_touches_the_folder_above_it(tmp_path):
    """A run folder gone before its cleanup (or one that cannot be removed) must not make the shared temporary
    folder above it private: a cleanup that made its parent writable for itself once turned /tmp into mode 0700."""
    from snakeskills.sandbox.program_runner import _remove

    shared = tmp_path / "tmp"
    shared.mkdir()
    shared.chmod(0o1777)
    _remove(str(shared / "snakeskills-run-gone"))
    kept = shared / "snakeskills-run-kept"
    (kept / "inner").mkdir(parents=True)
    (kept / "inner" / "file").write_text("x")
    (kept / "link").symlink_to(shared)  # a link to the folder above: never followed
    (kept / "inner").chmod(0)
    _remove(str(kept))
    assert oct(shared.stat().st_mode & 0o7777) == oct(0o1777)
    assert list(shared.iterdir()) == []

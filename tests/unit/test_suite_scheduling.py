"""The suite's own scheduling (tests/conftest.py): every test module's tests run on one pytest-xdist worker, so a
module's fixtures (a finished run, a served model) are built once, and modules sharing a run share a worker."""

from __future__ import annotations

import re
import subprocess
import sys

from conftest import REPO, check_one_worker_per_group, group_of

MODULES = ["tests/unit/test_io.py", "tests/unit/test_paired.py", "tests/unit/test_progress.py"]


def test_each_module_runs_on_one_worker_of_two():
    """A nested run of three small modules on two workers, as the suite runs (pyproject's addopts)."""
    process = subprocess.run(
        [sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", *MODULES],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=600,
    )
    assert process.returncode == 0, process.stdout[-3000:]
    workers: dict[str, set[str]] = {}
    for worker, module in re.findall(r"\[(gw\d+)\] \[\s*\d+%\] PASSED (tests/\S+?\.py)::", process.stdout):
        workers.setdefault(module, set()).add(worker)
    assert sorted(workers) == MODULES, process.stdout[-3000:]
    assert all(len(ran) == 1 for ran in workers.values()), workers


def test_modules_sharing_a_run_form_one_group():
    assert group_of("tests/workflow/test_kill.py::test_x[a::b]") == "default-run"
    assert group_of("tests/workflow/test_methods.py::test_y") == group_of("tests/workflow/test_end_to_end.py::t")
    assert group_of("tests/unit/test_io.py::test_z") == "test_io"


def test_a_group_on_two_workers_fails_the_run(tmp_path):
    (tmp_path / "gw0").write_text("test_io\ndefault-run\n")
    (tmp_path / "gw1").write_text("test_paired\ndefault-run\n")
    assert check_one_worker_per_group(tmp_path) == ["default-run (gw0, gw1)"]
    (tmp_path / "gw1").write_text("test_paired\n")
    assert check_one_worker_per_group(tmp_path) == []

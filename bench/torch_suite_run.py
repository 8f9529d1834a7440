"""One run of PyTorch's own distributed test suite (bench/torch-suite).

Runs torch.testing._internal.distributed.distributed_test's _DistTestBase,
as torch's test_distributed_spawn.py does for one backend, in the torch of
the Python running this file, and writes every test's outcome to the JSON
file named by $SUITE_OUT (rewritten after each test, so a run cut short
keeps what it did).

Environment (bench/torch-suite sets it): WORLD_SIZE, TEMP_DIR, BACKEND
(gloo: the suite's skip conditions then pick the tests gloo runs; mpi for
the tests only MPI may run),
SUITE_STANDIN=autoinfra to make autoinfra stand in for every group the
tests create (init_process_group, new_group and new_subgroups of backend
gloo or $BACKEND, or of none, become autoinfra's), SUITE_STANDIN=native
to only register autoinfra (BACKEND=autoinfra: the suite asks for it by
name, as torch's harness would for a backend of its own), SUITE_TESTS a regular expression
of test names to run, SUITE_SPAWN=1 to start ranks with spawn instead of
fork.

Ranks are forked (SUITE_SPAWN unset): torch 2's import costs seconds per
rank on a loaded machine, and this file holds no threads when it forks.
"""
import json
import os
import re
import sys
import time
import traceback
import unittest

import torch
import torch.distributed as dist

STANDIN = os.environ.get("SUITE_STANDIN", "")

if STANDIN in ("autoinfra", "native"):
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
    import autoinfra.torch  # noqa: F401  (registers the backend)

if STANDIN == "autoinfra":
    def _swap(backend):
        if backend is None:
            return None
        return "autoinfra" if str(backend).lower() in ("gloo", os.environ["BACKEND"]) else backend

    _init = dist.init_process_group
    _new_group = dist.new_group
    _new_subgroups = dist.new_subgroups
    _new_subgroups_enum = getattr(dist, "new_subgroups_by_enumeration", None)

    def init_process_group(*args, **kwargs):
        if args:
            args = (_swap(args[0]),) + args[1:]
        if "backend" in kwargs:
            kwargs["backend"] = _swap(kwargs["backend"])
        return _init(*args, **kwargs)

    def new_group(*args, **kwargs):
        if len(args) >= 3:
            args = args[:2] + (_swap(args[2]),) + args[3:]
        if "backend" in kwargs:
            kwargs["backend"] = _swap(kwargs["backend"])
        return _new_group(*args, **kwargs)

    def new_subgroups(*args, **kwargs):
        if "backend" in kwargs:
            kwargs["backend"] = _swap(kwargs["backend"])
        return _new_subgroups(*args, **kwargs)

    def new_subgroups_by_enumeration(*args, **kwargs):
        if "backend" in kwargs:
            kwargs["backend"] = _swap(kwargs["backend"])
        return _new_subgroups_enum(*args, **kwargs)

    for mod in (dist, dist.distributed_c10d):
        mod.init_process_group = init_process_group
        mod.new_group = new_group
        mod.new_subgroups = new_subgroups
        if _new_subgroups_enum is not None:
            mod.new_subgroups_by_enumeration = new_subgroups_by_enumeration

from torch.testing._internal.distributed.distributed_test import (  # noqa: E402
    DistributedTest, TestDistBackend)


class TestSuite(TestDistBackend, DistributedTest._DistTestBase):
    def setUp(self):
        super().setUp()
        if os.environ.get("SUITE_SPAWN") == "1":
            self._spawn_processes()
        else:
            self._start_processes(torch.multiprocessing.get_context("fork").Process)


def _message(err):
    text = "".join(traceback.format_exception(*err)) if isinstance(err, tuple) else str(err)
    # A rank's error arrives as "Process i exited with error code 10 and
    # exception:\n<its traceback>"; keep the last lines of each.
    lines = [ln for ln in text.splitlines() if ln.strip()]
    keep = [ln for ln in lines if re.match(r"^(Process \d+|[A-Za-z_.]*(Error|Exception)\b|"
                                          r"torch\.\w+.*Error|.*Timing out|.*timed out)", ln)]
    return "\n".join((keep or lines[-6:])[:12])[:2000]


def _status(kind, err):
    if kind != "error":
        return kind
    text = "".join(traceback.format_exception(*err))
    if "terminated or timed out" in text or "Timing out after" in text:
        return "timeout"
    if "AssertionError" in text or "assertRaises" in text or "Mismatch" in text:
        return "failed"
    return "errored"


class Recorder(unittest.TestResult):
    def __init__(self, path):
        super().__init__()
        self.path, self.rows, self.t0 = path, [], 0.0

    def startTest(self, test):
        super().startTest(test)
        self.t0 = time.time()
        sys.stderr.write(f"{test.id().split('.')[-1]} ... ")
        sys.stderr.flush()

    def _row(self, test, kind, err=None, reason=None):
        row = {"test": test.id().split(".")[-1], "status": _status(kind, err),
               "seconds": round(time.time() - self.t0, 2)}
        if err is not None:
            row["message"] = _message(err)
        if reason:
            row["message"] = str(reason)[:300]
        self.rows.append(row)
        sys.stderr.write(f"{row['status']} {row['seconds']}s\n")
        sys.stderr.flush()
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(self.rows, f, indent=0)
        os.replace(tmp, self.path)

    def addSuccess(self, test):
        super().addSuccess(test)
        self._row(test, "passed")

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._row(test, "failed", err)

    def addError(self, test, err):
        super().addError(test, err)
        self._row(test, "error", err)

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self._row(test, "skipped", reason=reason)

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self._row(test, "passed")

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self._row(test, "failed", reason="unexpected success")


def main():
    pattern = re.compile(os.environ.get("SUITE_TESTS", ".*"))
    skip = re.compile(os.environ.get("SUITE_SKIP", "^$"))
    names = [n for n in unittest.TestLoader().getTestCaseNames(TestSuite)
             if pattern.search(n) and not skip.search(n)]
    suite = unittest.TestSuite(TestSuite(n) for n in names)
    result = Recorder(os.environ["SUITE_OUT"])
    suite.run(result)


if __name__ == "__main__":
    main()

"""Shared helpers for the integration tests: they drive the real build/voxscale binary."""
import json
import os
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# VOXSCALE names another binary (ci/gpu.sh points it at the build it carried to a GPU machine).
VOXSCALE = os.path.abspath(os.environ.get("VOXSCALE") or os.path.join(ROOT, "build", "voxscale"))


def run(*args, check=True, timeout=600, env=None):
    """Runs voxscale with args from the repo root; returns the CompletedProcess (text)."""
    p = subprocess.run([VOXSCALE, *map(str, args)], cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                       env=env)
    if check and p.returncode != 0:
        raise AssertionError("voxscale %s failed (%d):\n%s\n%s" % (" ".join(map(str, args)), p.returncode, p.stdout, p.stderr))
    return p


def metrics(run_dir):
    """The run's metrics.jsonl as a list of dicts."""
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


@pytest.fixture(scope="session", autouse=True)
def built_binary():
    if not os.access(VOXSCALE, os.X_OK):
        pytest.fail("%s is missing: run `make` first (make test does)" % VOXSCALE)


def pytest_configure(config):
    config.addinivalue_line("markers", "host_only: a check of a GPU test file's own logic, run without a GPU too")

"""The data surfaces under hostile input (issue 24), each case a reproduction that once went wrong: FIFOs, NaN and
Inf voxels, NIfTI vox_offset, mixed PNG bit depths, CSV manifests as spreadsheets write them, damage found late,
multi-member gzip, libpng's own lines and NIfTI's messages. Every refusal is exit 2 and one line naming the file
(and its manifest row), and a rerun with the same --out after the input is fixed succeeds without removing
anything by hand."""
import gzip
import json
import os
import shutil
import struct
import subprocess
import zlib

import numpy as np
import pytest

from conftest import ROOT, metrics, run
from test_data import data_config, nib, write_dataset, write_png


def assert_bad(p, *needles):
    assert p.returncode == 2, (p.returncode, p.stdout[-1500:], p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    for n in needles:
        assert n in lines[0], (n, lines[0])


def test_exp_and_silu_take_nan_without_undefined_behaviour(tmp_path):
    """kernels/common/exp_cpu.h converted NaN to int and shifted the negative result (UBSan's report)."""
    exe = tmp_path / "exp_nan"
    subprocess.run(["cc", "-std=c11", "-O1", "-fsanitize=undefined,float-cast-overflow", "-fno-sanitize-recover=all",
                    "-I" + os.path.join(ROOT, "kernels"), os.path.join(ROOT, "tests", "tools", "exp_nan.c"), "-o",
                    str(exe)], check=True)
    p = subprocess.run([str(exe), "nan", "-nan", "inf", "-inf", "1e30", "-1e30", "0.5"], capture_output=True,
                       text=True)
    assert p.returncode == 0 and "runtime error" not in p.stderr, p.stderr
    rows = {line.split()[0]: line.split()[1:] for line in p.stdout.splitlines()}
    assert all(v.endswith("nan") for v in rows["nan"][:2]), rows  # NaN in, NaN out: divergence still shows
    assert float(rows["0.5"][1]) == pytest.approx(0.5 / (1 + np.exp(-0.5)), rel=1e-6)

"""The diffusion schedules' host math (src/graph/diffusion_schedule.c) against diffusers' formulas written here in torch
float64 (diffusers is not installed; its DDPMScheduler / DDIMScheduler code is transcribed): betas_for_alpha_bar with
the cosine ("squaredcos_cap_v2", max_beta 0.999) and "linear" (torch.linspace(1e-4, 2e-2, T)) betas, alphas_cumprod =
cumprod(1 - betas), and DDIMScheduler.set_timesteps with timestep_spacing "leading" (steps_offset 0) and "trailing". diffusers keeps
the table in float32; here both sides are float64. build/tests/test_diffusion_schedule --dump writes the tables."""
import math
import os
import subprocess

import numpy as np
import pytest
import torch

from conftest import ROOT, TESTS

BIN = os.path.join(TESTS, "test_diffusion_schedule")
T = 1000


@pytest.fixture(scope="module")
def dumped(tmp_path_factory):
    if not os.access(BIN, os.X_OK):
        pytest.fail("%s is missing: run `make build/tests/test_diffusion_schedule` (make test builds it)" % BIN)
    d = str(tmp_path_factory.mktemp("schedule"))
    subprocess.run([BIN, "--dump", d], check=True, timeout=60)
    return d


def betas_for_alpha_bar(num_diffusion_timesteps, max_beta=0.999):
    """diffusers.schedulers.scheduling_ddpm.betas_for_alpha_bar, alpha_transform_type "cosine", in float64"""
    def alpha_bar_fn(t):
        return math.cos((t + 0.008) / 1.008 * math.pi / 2) ** 2
    betas = []
    for i in range(num_diffusion_timesteps):
        t1 = i / num_diffusion_timesteps
        t2 = (i + 1) / num_diffusion_timesteps
        betas.append(min(1 - alpha_bar_fn(t2) / alpha_bar_fn(t1), max_beta))
    return torch.tensor(betas, dtype=torch.float64)


def alphas_cumprod(schedule):
    if schedule == "linear":
        betas = torch.linspace(1e-4, 2e-2, T, dtype=torch.float64)
    else:
        betas = betas_for_alpha_bar(T)
    return torch.cumprod(1.0 - betas, dim=0)


@pytest.mark.parametrize("schedule", ["linear", "cosine"])
def test_alphabar_matches_diffusers_formulas(dumped, schedule):
    got = torch.from_numpy(np.fromfile(os.path.join(dumped, schedule + ".f64"), dtype=np.float64))
    want = alphas_cumprod(schedule)
    assert got.shape == want.shape
    rel = ((got - want).abs() / want).max().item()
    assert rel < 1e-12, "%s: largest relative difference %.3g" % (schedule, rel)


@pytest.mark.parametrize("steps", [1, 3, 16, 50, 250, 999, 1000])
def test_ddim_leading_timesteps(dumped, steps):
    got = np.fromfile(os.path.join(dumped, "ddim_%d.i32" % steps), dtype=np.int32)
    # DDIMScheduler.set_timesteps, "leading": step_ratio = T // N; (arange(N) * step_ratio).round()[::-1] + offset
    step_ratio = T // steps
    want = (np.arange(0, steps) * step_ratio).round()[::-1].copy().astype(np.int64)
    assert got.tolist() == want.tolist()


@pytest.mark.parametrize("steps", [1, 3, 16, 50, 250, 999, 1000])
def test_ddim_trailing_timesteps(dumped, steps):
    got = np.fromfile(os.path.join(dumped, "ddim_trailing_%d.i32" % steps), dtype=np.int32)
    # DDIMScheduler.set_timesteps, "trailing": step_ratio = T / N; round(arange(T, 0, -step_ratio)) - 1
    want = (np.round(np.arange(T, 0, -T / steps)).astype(np.int64) - 1)
    assert got.tolist() == want.tolist()

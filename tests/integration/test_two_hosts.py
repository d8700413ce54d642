"""Two hosts on one machine: two network namespaces joined by a veth pair (addresses of this test's own choosing,
inside the namespaces only: nothing outside this machine is ever addressed), the link shaped with tc, and ranks in
both. The multi-node path crosses a host boundary here as it would between nodes: 2 x 2 CPU ranks started
torchrun-style (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE; MASTER_ADDR the first namespace's address) train
DDP and ZeRO-2 to the one-host losses, so do 2 x 2 MPI ranks under mpirun with a host list (mpirun in the first
namespace, its daemon started in the second by a plm_rsh_agent that does what ssh would), `bench scaling`'s
projection of 4 ranks over the shaped link (a and B fitted by bench allreduce across it) is checked against the
4 ranks it measures there (its error printed; held to the one-host test's bound, a timing check that load on this
shared machine can fail, so a run outside it is measured once more before the test fails), and a cut link (the
veth set down mid-run) ends every rank with the watchdog's named error and exit 3.

Needs root and `ip netns` (CAP_SYS_ADMIN, CAP_NET_ADMIN): the module skips with the reason where either is missing.
tc's netem (latency) is a kernel module this VM's kernel does not have; the link is shaped in bandwidth with tbf,
and where netem exists the latency is set too (the test says which it got)."""
import json
import os
import subprocess
import time

import pytest

from conftest import MPIRUN, ROOT, VOXSCALE, metrics

TINY = "configs/test/tiny.json"
QUIET = ["--threads", "1", "--set", "train.val_samples=0", "--set", "output.tensorboard=0", "--set",
         "train.log_every=1"]
SUBNET = "10.231.%d" % (os.getpid() % 200 + 20)  # private, and only inside the two namespaces
RATE = "1gbit"  # the shaped link: about 1/12 of one host's MPI all-reduce rate here (1.5 GB/s), NVLink:IB-like
DELAY = "1ms"


def sh(*args, check=True):
    p = subprocess.run(list(args), capture_output=True, text=True)
    if check and p.returncode != 0:
        raise RuntimeError("%s: %s" % (" ".join(args), p.stderr.strip()))
    return p


def why_not():
    """None where namespaces can be made here, else the reason."""
    if os.geteuid() != 0:
        return "needs root (ip netns, veth and tc need CAP_SYS_ADMIN and CAP_NET_ADMIN)"
    if subprocess.run(["which", "ip"], capture_output=True).returncode != 0:
        return "iproute2's ip is not installed"
    name = "vxprobe%d" % os.getpid()
    p = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True)
    if p.returncode != 0:
        return "ip netns add is not permitted here: %s" % p.stderr.strip()
    subprocess.run(["ip", "netns", "del", name], capture_output=True)
    return None


REASON = why_not()
pytestmark = pytest.mark.skipif(REASON is not None, reason=str(REASON))


class Hosts:
    """Namespaces a and b, veth a0 (SUBNET.1) <-> b0 (SUBNET.2), both ends shaped."""

    def __init__(self):
        tag = os.getpid()
        self.ns = {"a": "vx%da" % tag, "b": "vx%db" % tag}
        self.dev = {"a": "vx%da0" % tag, "b": "vx%db0" % tag}
        self.addr = {"a": SUBNET + ".1", "b": SUBNET + ".2"}
        for h in "ab":
            sh("ip", "netns", "add", self.ns[h])
        sh("ip", "link", "add", self.dev["a"], "type", "veth", "peer", "name", self.dev["b"])
        self.shaping = []
        for h in "ab":
            ex = ["ip", "netns", "exec", self.ns[h]]
            sh("ip", "link", "set", self.dev[h], "netns", self.ns[h])
            sh(*ex, "ip", "addr", "add", self.addr[h] + "/24", "dev", self.dev[h])
            sh(*ex, "ip", "link", "set", self.dev[h], "up")
            sh(*ex, "ip", "link", "set", "lo", "up")
            # latency where netem exists (then tbf under it), else bandwidth alone
            if sh(*ex, "tc", "qdisc", "add", "dev", self.dev[h], "root", "handle", "1:", "netem", "delay", DELAY,
                  check=False).returncode == 0:
                sh(*ex, "tc", "qdisc", "add", "dev", self.dev[h], "parent", "1:1", "handle", "10:", "tbf", "rate",
                   RATE, "burst", "256kb", "latency", "100ms")
                self.shaping.append("%s: netem %s + tbf %s" % (h, DELAY, RATE))
            else:
                sh(*ex, "tc", "qdisc", "add", "dev", self.dev[h], "root", "tbf", "rate", RATE, "burst", "256kb",
                   "latency", "100ms")
                self.shaping.append("%s: tbf %s (no netem in this kernel: no added latency)" % (h, RATE))

    def agent(self, folder):
        """mpirun's plm_rsh_agent ("agent HOST CMD..."): CMD run in HOST's namespace, as ssh would on a node"""
        path = os.path.join(str(folder), "netns_agent.sh")
        with open(path, "w") as f:
            f.write("#!/bin/sh\nhost=$1; shift\ncase \"$host\" in\n  %s) ns=%s;;\n  %s) ns=%s;;\n"
                    "  *) echo \"no namespace for $host\" >&2; exit 1;;\nesac\nexec ip netns exec $ns sh -c \"$*\"\n"
                    % (self.addr["a"], self.ns["a"], self.addr["b"], self.ns["b"]))
        os.chmod(path, 0o755)
        return path

    def exec(self, h):
        return ["ip", "netns", "exec", self.ns[h]]

    def close(self):
        for h in "ab":
            subprocess.run(["ip", "netns", "del", self.ns[h]], capture_output=True)  # (takes its veth end along)


@pytest.fixture(scope="module")
def hosts():
    h = Hosts()
    print("\nhosts: %s; %s" % (h.addr, "; ".join(h.shaping)))
    yield h
    h.close()


def torchrun_env(rank, world, local, local_world, addr, port):
    return dict(os.environ, RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(local),
                LOCAL_WORLD_SIZE=str(local_world), MASTER_ADDR=addr, MASTER_PORT=str(port))


def start_ranks(hosts, out, args, port):
    """2 x 2 ranks: 0 and 1 in namespace a, 2 and 3 in b; MASTER_ADDR a's address for all (for b's ranks: the
    other host's)"""
    procs = []
    for rank in range(4):
        h = "a" if rank < 2 else "b"
        env = torchrun_env(rank, 4, rank % 2, 2, hosts.addr["a"], port)
        procs.append(subprocess.Popen([*hosts.exec(h), VOXSCALE, "train", "--config", TINY, "--out", str(out),
                                       *map(str, args)], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    return procs


def losses(out):
    return {m["step"]: m["loss"] for m in metrics(out) if "loss" in m}


def one_host(tmp_path, name, args, port):
    """The same 4 ranks on one host (the loopback): the reference"""
    out = tmp_path / name
    procs = []
    for rank in range(4):
        env = torchrun_env(rank, 4, rank, 4, "127.0.0.1", port)
        procs.append(subprocess.Popen([VOXSCALE, "train", "--config", TINY, "--out", str(out), *map(str, args)],
                                      cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, outs
    return out


@pytest.mark.parametrize("zero", [0, 2])
def test_two_hosts_train_the_one_host_model(hosts, tmp_path, zero):
    args = ["--steps", "10", "--set", "train.global_batch=8", "--zero", zero, *QUIET]
    port = 29000 + os.getpid() % 500 + 10 * zero
    out = tmp_path / "two"
    procs = start_ranks(hosts, out, args, port)
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, outs
    assert "4 ranks (torchrun)" in outs[0][0], outs[0][0][-2000:]
    ref = one_host(tmp_path, "one", args, port + 5)
    a, b = losses(out), losses(ref)
    assert sorted(a) == list(range(1, 11))
    print("\nZeRO-%d, 2 hosts x 2 ranks over the shaped veth vs 4 ranks on one host: losses %s" %
          (zero, "identical" if a == b else "differ"))
    assert a == b  # the same communicator, the same sums: bit for bit


def test_a_cut_link_ends_every_rank(hosts, tmp_path):
    out = tmp_path / "cut"
    port = 29000 + os.getpid() % 500 + 40
    procs = start_ranks(hosts, out, ["--steps", "100000", "--set", "dist.timeout_s=4", *QUIET], port)
    deadline = time.time() + 120
    while time.time() < deadline and (not (out / "metrics.jsonl").exists() or len(losses(out)) < 3):
        time.sleep(0.2)
    assert len(losses(out)) >= 3, "the run did not start"
    t0 = time.time()
    try:
        sh(*hosts.exec("a"), "ip", "link", "set", hosts.dev["a"], "down")
        outs = [p.communicate(timeout=60) for p in procs]
    finally:
        sh(*hosts.exec("a"), "ip", "link", "set", hosts.dev["a"], "up", check=False)
        for p in procs:
            if p.poll() is None:
                p.kill()
    took = time.time() - t0
    codes = [p.returncode for p in procs]
    print("\ncut link: exit codes %s, %.1f s after the cut; rank 0: %s" %
          (codes, took, outs[0][1].strip().splitlines()[-1:] if outs[0][1] else ""))
    assert codes == [3] * 4, (codes, [o[1][-1500:] for o in outs])
    for rank, (_, err) in enumerate(outs):
        assert "rank %d/4" % rank in err and ("dist.timeout_s" in err or "vanished" in err), err[-1500:]
    assert took < 4 + 30




@pytest.mark.skipif(subprocess.run(["which", "mpirun"], capture_output=True).returncode != 0,
                    reason="mpirun (openmpi-bin) is not installed; ci/deps.sh installs it")
@pytest.mark.parametrize("zero", [0, 2])
def test_mpirun_with_a_host_list_trains_the_one_host_model(hosts, tmp_path, zero):
    args = ["train", "--config", TINY, "--steps", "10", "--set", "train.global_batch=8", "--zero", zero, *QUIET]
    out = tmp_path / "two"
    over = ["--mca", "plm_rsh_agent", hosts.agent(tmp_path), "--mca", "btl", "tcp,self",
            "--mca", "btl_tcp_if_include", SUBNET + ".0/24", "--mca", "oob_tcp_if_include", SUBNET + ".0/24",
            "--host", "%s:2,%s:2" % (hosts.addr["a"], hosts.addr["b"])]
    p = subprocess.run([*hosts.exec("a"), *MPIRUN, *over, "-np", "4", VOXSCALE, *map(str, args), "--out", str(out)],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, (p.stdout[-3000:], p.stderr[-3000:])
    assert "4 ranks (mpirun), this is rank 0 (local 0 of 2)" in p.stdout, p.stdout[-3000:]
    ref = tmp_path / "one"
    q = subprocess.run([*MPIRUN, "-np", "4", VOXSCALE, *map(str, args), "--out", str(ref)], cwd=ROOT,
                       capture_output=True, text=True, timeout=300)
    assert q.returncode == 0, q.stderr[-3000:]
    a, b = losses(out), losses(ref)
    assert sorted(a) == list(range(1, 11)) and a == b  # our own MPI ring: the same sums over any transport
    print("\nZeRO-%d under mpirun --host a:2,b:2: the one-host losses, bit for bit" % zero)


def mpirun_over(hosts, folder):
    return ["--mca", "plm_rsh_agent", hosts.agent(folder), "--mca", "btl", "tcp,self",
            "--mca", "btl_tcp_if_include", SUBNET + ".0/24", "--mca", "oob_tcp_if_include", SUBNET + ".0/24",
            "--host", "%s:2,%s:2" % (hosts.addr["a"], hosts.addr["b"])]


@pytest.mark.skipif(subprocess.run(["which", "mpirun"], capture_output=True).returncode != 0,
                    reason="mpirun (openmpi-bin) is not installed; ci/deps.sh installs it")
@pytest.mark.parametrize("zero", [0, 2])
def test_bench_scaling_projects_the_shaped_link(hosts, tmp_path, zero):
    env = dict(os.environ, VX_MPIRUN_ARGS=" ".join(mpirun_over(hosts, tmp_path)))
    # The projection's error is a timing check, with test_bench_scaling's one-host bound: the projection's compute is a
    # one-rank step timed at another moment, so load on this shared machine moves it (seen: +71% to +116% at load
    # 6-17; once +146% at load 2 in a CI run, where three reruns gave -9% to +18%). So a run outside the bound is
    # measured once more before the test fails; everything but the bound is checked on every run.
    for attempt in range(2):
        res = tmp_path / ("results%d" % attempt)
        p = subprocess.run([*hosts.exec("a"), VOXSCALE, "bench", "scaling", "--gpus", "1,4", "--mode", "weak",
                            "--steps", "5", "--device", "cpu", "--set", "model.input_size=[16,16,16]", "--set",
                            "dist.zero=%d" % zero, "--results", str(res)], cwd=ROOT, env=env, capture_output=True,
                           text=True, timeout=600)
        assert p.returncode == 0, (p.stdout[-3000:], p.stderr[-3000:])
        [dev] = [d for d in os.listdir(res) if os.path.isdir(res / d)]
        r = json.load(open(res / dev / "scaling_default.json"))
        assert r["interconnect_beyond"].startswith("measured: bench allreduce on 4 CPU ranks over MPI"), r
        assert r["data_parallel_mode"] == ("DDP" if zero == 0 else "ZeRO-2")
        rows = {x["ranks"]: x for x in r["rows"]}
        one, four = rows[1], rows[4]
        assert four["kind"] == "measured", four
        fit = [f for f in r["fits"] if f["ranks"] == 4][0]
        print("\n%s, 2 hosts x 2 ranks over %s (run %d): measured %.2f samples/s, projected %.2f: model error %+.0f%% "
              "(one rank: %+.0f%%); link fit a = %.0f us, B = %.3f GB/s; load %s" % (
                  r["data_parallel_mode"], RATE, attempt + 1, four["samples_per_s"], four["model_samples_per_s"],
                  100 * four["model_error"], 100 * one["model_error"], fit["alpha_us"], fit["bus_gbps"],
                  r["load_average_before_after"]))
        if abs(four["model_error"]) < 1.0:
            break
    assert abs(four["model_error"]) < 1.0, four

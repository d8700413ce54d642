"""ci/regress_ab.py: the gate's comparison of this tree with its parent commit (ci/regress imports it).

Both are built here, in the same job, the same way (CPU-only, -march=x86-64-v3: what valgrind can run, and the
same flags for both, so only the code differs); the parent's build is cached by commit. Then:
  time    `bench kernels` and `bench step` of the timing config, run in alternating pairs (this, parent, this,
          parent, ...): a neighbour's load on a shared VM hits both sides of a pair alike. Per op and pair, the
          geometric mean over its cases of this build's median call over the parent's; an op regresses when that
          ratio exceeds 1 + tolerance in every pair (a burst of load slows one pair, a regression every pair),
          and again in as many pairs of its own, timed alone after the first round.
  count   `bench kernels` of the count configs under callgrind (VX_KERNELS_CALLGRIND=1, src/bench/kernel_count.c):
          each case's instructions for one call, one thread; per op the sum over its cases; an op regresses when
          this build executes more than 1 + tolerance of the parent's. Counts do not move with load; they cover
          the convolutions on each CPU path (VX_CONV_CPU=im2col, onednn) where both builds have it. Under valgrind
          the CPU shows AVX2 (valgrind runs no AVX-512), so the kernels counted are the AVX2 ones.
A parent built before the count mode existed gives no counts: said, and the gate rests on the times."""
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ARCH = "-march=x86-64-v3"
TOL_TIME = 0.15   # every pair slower by more than this: a regression
TOL_COUNT = 0.03  # instructions: deterministic up to library internals, 3% is far above their jitter
# ... except on ops of a few thousand instructions, where glibc malloc's heap state alone moves the count by hundreds:
# linear_backward_filter counted 3812 vs 3606 with the kernel's own 1990 equal in both builds (one build's call went
# through malloc_consolidate). An op regresses on its count only when it also grew by more than this many
# instructions per call (under a microsecond: below what the timing pairs can see, and no kernel's work).
MIN_COUNT_GROWTH = 2000


def sh(cmd, **kw):
    return subprocess.run(cmd, cwd=kw.pop("cwd", ROOT), capture_output=True, text=True, **kw)


def git(*args):
    p = sh(["git", *args])
    return p.stdout.strip() if p.returncode == 0 else None


def parent_rev():
    """(rev, why): HEAD when tracked files have changes (the tree is what is tested), else HEAD's first parent."""
    if git("rev-parse", "--is-inside-work-tree") != "true":
        return None, "not a git checkout"
    dirty = git("status", "--porcelain", "--untracked-files=no")
    if dirty:
        return git("rev-parse", "HEAD"), "the working tree's changes against HEAD"
    rev = git("rev-parse", "--verify", "-q", "HEAD~1")
    return (rev, "HEAD against its parent") if rev else (None, "HEAD has no parent in this clone (shallow?)")


def make(src, build, extra=()):
    """make CUDA=0 ARCH=x86-64-v3 in src into build; returns the binary or exits with the log's end."""
    jobs = str(os.cpu_count() or 2)
    p = sh(["make", "-j" + jobs, "CUDA=0", "ARCH=" + ARCH, "BUILD=" + build, *extra, os.path.join(build, "voxscale")],
           cwd=src)
    if p.returncode != 0:
        sys.exit("ci/regress: building %s failed:\n%s" % (src, (p.stdout + p.stderr)[-3000:]))
    return os.path.join(build, "voxscale")


def build_parent(rev):
    cache = os.environ.get("VX_REGRESS_CACHE", "/var/tmp/voxscale-regress")
    out = os.path.join(cache, rev[:12])
    binary = os.path.join(out, "build", "voxscale")
    if os.access(binary, os.X_OK):
        return binary
    tmp = out + ".tmp%d" % os.getpid()
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    arch = subprocess.Popen(["git", "archive", rev], cwd=ROOT, stdout=subprocess.PIPE)
    subprocess.run(["tar", "-x", "-C", tmp], stdin=arch.stdout, check=True)
    if arch.wait() != 0:
        sys.exit("ci/regress: git archive %s failed" % rev)
    make(tmp, os.path.join(tmp, "build"))
    shutil.rmtree(out, ignore_errors=True)
    os.replace(tmp, out)  # a finished build only: an interrupted one is never taken for done
    return binary


def build_this():
    # the folder of ci/test.sh's CPU-only build and the ISA sweep's avx2 level, built with these flags
    return make(ROOT, os.path.join(ROOT, "build", "isa-x86-64-v3"))


def has(binary, text):
    with open(binary, "rb") as f:
        return text.encode() in f.read()


# ---- time -------------------------------------------------------------------------------------------------------

def run_json(binary, sub, config, extra, env=None):
    out = tempfile.mkdtemp(prefix="voxscale-ab-")
    p = sh([binary, "bench", sub, "--config", config, "--device", "cpu", "--results", out, *extra],
           env=dict(os.environ, **(env or {})))
    if p.returncode != 0:
        sys.exit("ci/regress: %s bench %s exited %d:\n%s" % (binary, sub, p.returncode, (p.stdout + p.stderr)[-3000:]))
    [dev] = os.listdir(out)
    stem = os.path.splitext(os.path.basename(config))[0]
    with open(os.path.join(out, dev, "%s_%s.json" % ("kernels" if sub == "kernels" else "step", stem))) as f:
        j = json.load(f)
    shutil.rmtree(out, ignore_errors=True)
    return j


STEP = "step (fastest of 6)"


def time_pairs(new, base, config, pairs, ops, budget_ms, log, kernels=True, step=None):
    """{op: [ratio per pair]} (geometric mean over the op's cases of new median / base median) and the step's (STEP;
    timed when `step`, by default when all ops are)."""
    extra = ["--budget-ms", str(budget_ms)] + (["--ops", ops] if ops else [])
    step = not ops if step is None else step
    ratios = {}
    for p in range(pairs):
        k, s = {"new": {}, "base": {}}, {}
        for who, binary in (("new", new), ("base", base)) if p % 2 == 0 else (("base", base), ("new", new)):
            if kernels:
                k[who] = {(c["op"], c["shape"]): c["median_us"]
                          for c in run_json(binary, "kernels", config, extra)["kernels"]}
            if step:
                s[who] = run_json(binary, "step", config, ["--iters", "6", "--warmup", "2"])["step_ms_min"]
        per_op = {}
        for key in set(k["new"]) & set(k["base"]):
            per_op.setdefault(key[0], []).append(math.log(k["new"][key] / k["base"][key]))
        for op, v in per_op.items():
            ratios.setdefault(op, []).append(math.exp(sum(v) / len(v)))
        if s:
            ratios.setdefault(STEP, []).append(s["new"] / s["base"])
        log("ci/regress: timing pair %d of %d done (load average %.1f)" % (p + 1, pairs, os.getloadavg()[0]))
    return ratios


# ---- count ------------------------------------------------------------------------------------------------------

def conv_ops():
    """The convolution's op names, as its spec file registers them (kernels/conv3d/conv3d_spec.c)."""
    with open(os.path.join(ROOT, "kernels", "conv3d", "conv3d_spec.c")) as f:
        return sorted(set(re.findall(r'"(conv3d_[a-z_]+)"', f.read())))


def count(binary, config, conv_path, rev=None, ops=None):
    """{(op, shape): instructions of one call} under callgrind, one thread. rev: the commit binary was built from;
    when it refuses the config as a usage error (exit 2: a key this tree added), its own tree's version of the
    config is counted instead (the shapes both have are compared). ops: only these ops (bench kernels --ops)."""
    out = tempfile.mkdtemp(prefix="voxscale-cg-")
    # its report goes to a folder of its own: in the tree's results/ it would be refused the second time (bench's
    # results are replaced only with --overwrite, which the parent's build may not know)
    results = tempfile.mkdtemp(prefix="voxscale-cg-results-")
    env = dict(os.environ, VX_KERNELS_CALLGRIND="1", VX_CONV_CPU=conv_path, VX_CONV_CACHE="off", OMP_NUM_THREADS="1")
    p = sh(["valgrind", "--tool=callgrind", "--instr-atstart=no", "--callgrind-out-file=" + os.path.join(out, "cg.out"),
            binary, "bench", "kernels", "--config", config, "--device", "cpu", "--threads", "1", "--results", results,
            # not the 512- and 4096-token reference attentions: under callgrind they took over 10 minutes (the
            # model's own attention shapes are counted)
            "--attention-tokens", "0"] + (["--ops", ",".join(ops)] if ops else []),
           env=env)
    shutil.rmtree(results, ignore_errors=True)
    if p.returncode == 2 and rev:
        own = git("show", "%s:%s" % (rev, config))
        if own is not None:
            shutil.rmtree(out, ignore_errors=True)
            path = os.path.join(tempfile.mkdtemp(prefix="voxscale-cg-config-"), os.path.basename(config))
            with open(path, "w") as f:
                f.write(own + "\n")
            print("ci/regress: %s refused %s (exit 2); counting its own tree's version" % (binary, config))
            return count(binary, path, conv_path, ops=ops)
    if p.returncode != 0:
        sys.exit("ci/regress: callgrind on %s exited %d:\n%s" % (binary, p.returncode, (p.stdout + p.stderr)[-3000:]))
    got = {}
    for name in os.listdir(out):
        case, total = None, None
        with open(os.path.join(out, name)) as f:
            for line in f:
                if line.startswith("desc: Trigger: Client Request: case "):
                    case = line.split("case ", 1)[1].strip()
                elif line.startswith("totals:"):
                    total = int(line.split()[1])
        if case and total is not None:
            op, shape = case.split(" ", 1)
            got[(op, shape)] = total
    shutil.rmtree(out, ignore_errors=True)
    return got


def count_ratios(new, base, configs, log, rev=None):
    """{op: (new instructions, base instructions)} summed over the op's cases in every count config and path; rev:
    the commit base was built from (count's fallback)."""
    paths = ["im2col", "onednn"] if has(base, "VX_CONV_CPU") else ["im2col"]
    sums = {}
    convs = conv_ops()
    for config in configs:
        for path in paths:
            # the second path counts the convolutions alone: the other ops do not depend on it and are kept from the
            # first (counting them twice under valgrind took a third of the counts' two minutes)
            ops = convs if path != paths[0] else None
            n, b = count(new, config, path, ops=ops), count(base, config, path, rev, ops=ops)
            for key in set(n) & set(b):
                if key[0].startswith("conv3d") or path == "im2col":  # non-conv ops once
                    op = key[0] + (" [%s]" % path if key[0].startswith("conv3d") else "")
                    t = sums.setdefault(op, [0, 0])
                    t[0] += n[key]
                    t[1] += b[key]
            log("ci/regress: counted %s with convolutions on %s: %d cases" % (config, path, len(set(n) & set(b))))
    return sums


# ---- the comparison ---------------------------------------------------------------------------------------------

ACCEPT = "Regress-accepted:"


def parse_accepted(message):
    """{(kind, op)} a commit message accepts: lines `Regress-accepted: KIND OP` (kind time or instructions; the op as
    the table names it, a convolution with its [path]), why in the message's own words around it."""
    got = set()
    for line in message.splitlines():
        if line.startswith(ACCEPT):
            w = line[len(ACCEPT):].split(None, 1)
            if len(w) == 2 and w[0] in ("time", "instructions"):
                got.add((w[0], w[1].strip()))
    return got


def head_accepted(why):
    """What HEAD's commit message accepts, only when HEAD is compared with its parent: a figure made slower on
    purpose (a trade measured and explained in that commit) is named there, and the acceptance ends with that commit:
    the next commit is compared with it, not with what came before."""
    if why != "HEAD against its parent":
        return set()
    return parse_accepted(git("log", "-1", "--format=%B", "HEAD") or "")


def gate(args, log=print):
    """Returns (regressed count, rows printed) or None when no parent can be had."""
    rev, why = None, None
    if args.base_bin:
        base, what = args.base_bin, "the given base binary %s" % args.base_bin
    else:
        rev, why = (args.against, "against %s" % args.against) if args.against else parent_rev()
        if not rev:
            log("ci/regress: no parent to compare with: %s" % why)
            return None
        log("ci/regress: building the parent %s (%s) ..." % (rev[:12], why))
        base, what = build_parent(rev), "%s (%s), built here" % (rev[:12], why)
    new = args.new_bin or build_this()
    log("ci/regress: this build %s against %s" % (new, what))
    rows = []
    if args.pairs > 0:
        ratios = time_pairs(new, base, args.config, args.pairs, args.ops, args.budget_ms, log)
        # A figure slower in every pair is timed again, alone, in as many new pairs, and is a regression only when it
        # is slower in those too. Why: on a shared VM a stretch of load can cover one side of every pair (this
        # machine's sgemm ceiling moved between 194 and 297 GFLOP/s from one minute to the next, and the same binary
        # against itself once came out with conv3d_backward_filter 1.32 / 1.18 / 1.30); a regression is slower
        # again, a burst of load seldom is.
        suspects = sorted(op for op, r in ratios.items() if min(r) > 1 + TOL_TIME)
        if suspects:
            log("ci/regress: slower in every pair: %s; timing them again" % ", ".join(suspects))
            ops = [op for op in suspects if op != STEP]
            again = time_pairs(new, base, args.config, args.pairs, ",".join(ops), args.budget_ms, log,
                               kernels=bool(ops), step=STEP in suspects)
            for op in suspects:
                ratios[op] = ratios[op] + again.get(op, [])
        for op, r in sorted(ratios.items()):
            worst_ok = min(r) > 1 + TOL_TIME
            rows.append(("time", op, statistics.median(r), " ".join("%.2f" % x for x in r), TOL_TIME,
                         "REGRESSED" if worst_ok else "ok"))
    if args.count_configs:
        if not shutil.which("valgrind"):
            log("ci/regress: no valgrind: instruction counts not compared (ci/deps.sh installs it)")
        elif not has(base, "VX_KERNELS_CALLGRIND"):
            log("ci/regress: the base build has no instruction-count mode (it predates it): counts not compared")
        else:
            for op, (n, b) in sorted(count_ratios(new, base, args.count_configs, log, rev).items()):
                r = n / b if b else 1.0
                worse = r > 1 + TOL_COUNT and n - b > MIN_COUNT_GROWTH
                rows.append(("instructions", op, r, "%d vs %d" % (n, b), TOL_COUNT, "REGRESSED" if worse else "ok"))
    accepted = getattr(args, "accepted", None)
    accepted = head_accepted(why) if accepted is None else accepted
    for i, row in enumerate(rows):
        if row[5] == "REGRESSED" and (row[0], row[1]) in accepted:
            rows[i] = row[:5] + ("accepted",)
            log("ci/regress: %s %s is slower than the parent, and HEAD's commit message accepts it (%s)" % (
                row[0], row[1], ACCEPT))
    log("%-13s %-40s %8s  %-34s %5s  %s" % ("kind", "op (this build / parent)", "ratio", "per pair / counts", "tol",
                                          "verdict"))
    for kind, op, r, detail, tol, verdict in sorted(rows, key=lambda x: -x[2]):
        log("%-13s %-40s %8.3f  %-34s %4.0f%%  %s" % (kind, op[:40], r, detail[:34], 100 * tol, verdict))
    return sum(row[5] == "REGRESSED" for row in rows), len(rows)

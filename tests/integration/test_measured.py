"""bench/report/measured.py (issue 36): the committed docs/measured.md is exactly what the committed results/ JSON
gives, so a figure that changes in results/ without the page being regenerated (or a page edited by hand) fails CI;
every step figure in it is the JSON's; the README's measured block is replaced between its markers and nowhere else,
and a README without the markers is refused with a message naming them. A few seconds; needs git, no build."""
import glob
import json
import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MEASURED = os.path.join(ROOT, "bench", "report", "measured.py")
RESULTS = os.path.join(ROOT, "results")
COMMITTED = os.path.join(ROOT, "docs", "measured.md")
BEGIN, END = "<!-- measured:begin -->", "<!-- measured:end -->"


def run(*args):
    return subprocess.run([sys.executable, MEASURED] + list(args), cwd=ROOT, capture_output=True, text=True,
                          timeout=120)


def missing_commits():
    """Commits the JSON names that this clone lacks (a shallow clone): their dates would read "?"."""
    names = set()
    for dirpath, _, files in os.walk(RESULTS):
        for f in files:
            if f.endswith(".json"):
                with open(os.path.join(dirpath, f)) as fh:
                    doc = json.load(fh)
                for d in doc if isinstance(doc, list) else [doc]:  # a list: side_by_side.sh's PyTorch runs
                    c = d.get("commit") if isinstance(d, dict) else None
                    if isinstance(c, str):
                        names.add(c)
    return sorted(c for c in names if subprocess.run(["git", "cat-file", "-e", c.removesuffix("-dirty") + "^{commit}"],
                                                     cwd=ROOT, capture_output=True).returncode != 0)


def skip_where_history_is_cut():
    """Skips where this checkout cannot date the commits the results name (a shallow clone, or a copy without git);
    in a full clone a name that is not a commit fails: a label such as "ed946f7 with a change" once kept both tests
    below skipping everywhere. A build of a changed tree is named "<hash>-dirty" and dated by its hash."""
    lacking = missing_commits()
    if not lacking:
        return
    p = subprocess.run(["git", "rev-parse", "--is-shallow-repository"], cwd=ROOT, capture_output=True, text=True)
    if p.returncode != 0 or p.stdout.strip() != "false":
        pytest.skip("this checkout lacks commits the results name (%s): a shallow clone or a copy without git cannot "
                    "date them" % ", ".join(lacking[:5]))
    pytest.fail("results/ names commits this repository's history does not have (%s): a JSON's \"commit\" must be a "
                "commit, or \"<hash>-dirty\" for a build of a changed tree" % ", ".join(lacking[:5]))


def test_committed_page_is_what_the_json_gives(tmp_path):
    skip_where_history_is_cut()
    out = tmp_path / "measured.md"
    p = run("--out", str(out))
    assert p.returncode == 0, p.stdout + p.stderr
    got, want = out.read_text(), open(COMMITTED).read()
    assert got == want, ("docs/measured.md is stale: regenerate it with `python3 bench/report/measured.py` and "
                         "commit it", [l for l in got.splitlines() if l not in want.splitlines()][:5])
    p = run("--check")
    assert p.returncode == 0 and "matches results/" in p.stdout, p.stdout + p.stderr


def test_committed_readme_block_is_what_the_json_gives(tmp_path):
    """The README's own measured block, regenerated into a copy, equals the committed README: its headline figures
    cannot go stale either."""
    skip_where_history_is_cut()
    readme = tmp_path / "README.md"
    shutil.copy(os.path.join(ROOT, "README.md"), readme)
    p = run("--out", str(tmp_path / "measured.md"), "--readme", str(readme))
    assert p.returncode == 0, p.stdout + p.stderr
    assert readme.read_text() == open(os.path.join(ROOT, "README.md")).read(), (
        "README.md's measured block is stale: `python3 bench/report/measured.py --readme README.md` and commit it")


def test_a_changed_figure_makes_the_page_stale(tmp_path):
    """--check fails when one JSON figure moves; the page then shows the new figure, read from the JSON."""
    res = tmp_path / "results"
    shutil.copytree(os.path.join(RESULTS, "cpu-amd-epyc-avx512-bf16-2c"), res / "cpu-amd-epyc-avx512-bf16-2c")
    page = tmp_path / "measured.md"
    assert run("--results", str(res), "--out", str(page)).returncode == 0
    step = res / "cpu-amd-epyc-avx512-bf16-2c" / "step_default.json"
    doc = json.loads(step.read_text())
    torch = json.loads((res / "cpu-amd-epyc-avx512-bf16-2c" / "pytorch_step_default.json").read_text())
    assert "| default | %d | fp32 | %.1f | %.1f " % (doc["batch"], doc["step_ms_median"], torch["step_ms_median"]) \
        in page.read_text()
    doc["step_ms_median"] = 99.5
    step.write_text(json.dumps(doc))
    p = run("--results", str(res), "--out", str(page), "--check")
    assert p.returncode == 1 and "is stale" in p.stdout, p.stdout + p.stderr
    assert run("--results", str(res), "--out", str(page)).returncode == 0
    assert "| 99.5 |" in page.read_text() and "| %.2fx |" % (torch["step_ms_median"] / 99.5) in page.read_text()


def test_a_reference_held_below_the_cpu_says_so(tmp_path):
    """A PyTorch run held to a lower ISA by the environment (side_by_side.sh records isa_env) is shown with those
    variables beside its figure, in the page and the README; without isa_env the cell has none."""
    res = tmp_path / "results"
    folder = res / "cpu-amd-epyc-avx512-bf16-2c"
    shutil.copytree(os.path.join(RESULTS, "cpu-amd-epyc-avx512-bf16-2c"), folder)
    page = tmp_path / "measured.md"
    assert run("--results", str(res), "--out", str(page)).returncode == 0
    assert "ATEN_CPU_CAPABILITY" not in page.read_text()
    ref = folder / "pytorch_step_default.json"
    doc = json.loads(ref.read_text())
    doc["isa_env"] = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"}
    ref.write_text(json.dumps(doc))
    readme = tmp_path / "README.md"
    readme.write_text(BEGIN + "\n" + END + "\n")
    assert run("--results", str(res), "--out", str(page), "--readme", str(readme)).returncode == 0
    cell = "%.1f (torch %s), ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2" % (
        doc["step_ms_median"], doc["torch"])
    assert cell in page.read_text() and cell in readme.read_text(), page.read_text()


def test_a_capped_reference_compiles_into_a_cache_of_its_own():
    """bench/isa_env.py: under a cap, torch.compile's disk cache is a folder named for the cap (an uncapped run's
    kernels, reused by a capped run, crashed it), a user's TORCHINDUCTOR_CACHE_DIR stands, and with nothing capped
    nothing is set; `bench/isa_env.py --inductor-cache` prints the same folder for side_by_side.sh."""
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    import isa_env
    caps = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2", "PATH": os.environ["PATH"]}
    folder = isa_env.inductor_cache(caps)
    assert folder and "aten_cpu_capability-avx2" in folder and "mkl_enable_instructions-avx2" in folder, folder
    assert isa_env.inductor_cache(dict(caps, ATEN_CPU_CAPABILITY="avx512")) != folder  # another cap, another folder
    assert isa_env.inductor_cache({"PATH": "/bin"}) is None
    assert isa_env.inductor_cache(dict(caps, TORCHINDUCTOR_CACHE_DIR="/mine")) is None
    assert isa_env.with_inductor_cache(caps)["TORCHINDUCTOR_CACHE_DIR"] == folder
    assert "TORCHINDUCTOR_CACHE_DIR" not in isa_env.with_inductor_cache({"PATH": "/bin"})
    cli = [sys.executable, os.path.join(ROOT, "bench", "isa_env.py")]
    p = subprocess.run(cli + ["--inductor-cache"], env=caps, capture_output=True, text=True)
    assert p.returncode == 0 and p.stdout.strip() == folder, p
    p = subprocess.run(cli + ["--inductor-cache"], env={"PATH": "/bin"}, capture_output=True, text=True)
    assert p.returncode == 0 and p.stdout.strip() == "", p
    p = subprocess.run(cli + ["--bogus"], capture_output=True, text=True)
    assert p.returncode == 2 and "usage: bench/isa_env.py --inductor-cache" in p.stderr, p


def test_readme_block_replaced_between_the_markers(tmp_path):
    res = tmp_path / "results"
    shutil.copytree(os.path.join(RESULTS, "cpu-amd-epyc-avx512-bf16-2c"), res / "cpu-amd-epyc-avx512-bf16-2c")
    readme = tmp_path / "README.md"
    before, after = "# title\n\nintro line\n", "\n## next section\nkept\n"
    readme.write_text(before + BEGIN + "\nold row 1\nold row 2\n" + END + after)
    page = tmp_path / "measured.md"
    p = run("--results", str(res), "--out", str(page), "--readme", str(readme))
    assert p.returncode == 0, p.stdout + p.stderr
    text = readme.read_text()
    assert text.startswith(before + BEGIN + "\n") and text.endswith(END + after)
    block = text[len(before + BEGIN + "\n"):-len(END + after)]
    assert "old row" not in block
    rows = [l for l in block.splitlines() if l.startswith("| cpu-")]
    configs = sorted(os.path.basename(f)[len("step_"):-len(".json")]
                     for f in glob.glob(str(res / "cpu-amd-epyc-avx512-bf16-2c" / "step_*.json")))
    assert len(configs) >= 3 and [r.split(" | ")[2] for r in rows] == configs, block
    assert "docs/measured.md" in block
    # regenerating is idempotent: the same JSON gives the same README
    assert run("--results", str(res), "--out", str(page), "--readme", str(readme)).returncode == 0
    assert readme.read_text() == text


@pytest.mark.parametrize("body", ["# no markers here\n", "%s\nonly the first\n" % BEGIN,
                                  "%s\nreversed\n%s\n" % (END, BEGIN)])
def test_readme_without_markers_is_refused(tmp_path, body):
    readme = tmp_path / "README.md"
    readme.write_text(body)
    page = tmp_path / "measured.md"
    p = run("--out", str(page), "--readme", str(readme))
    assert p.returncode == 2, p.stdout + p.stderr
    assert BEGIN in p.stderr and END in p.stderr and str(readme) in p.stderr, p.stderr
    assert readme.read_text() == body and not page.exists()  # nothing written, not half the work

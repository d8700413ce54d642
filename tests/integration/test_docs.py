"""Doc-tests (issue 36): every shell block of README.md and docs/*.md marked runnable (the line `<!-- runnable -->`
right before its ```sh fence) runs with bash against the built binary, each block one test, so a documented command
that fails fails CI; every relative link of those pages resolves (file, and anchor where given); the README stays a
landing page (under 400 lines); docs/config-reference.md equals a fresh generation from `--help-config`.

A block runs in a fresh temporary folder holding links to this repository's build/ (build/voxscale: the binary under
test), configs/, bench/, tests/ and .venv/, with .venv/bin and the binary's folder first on PATH (so `python` has
torch and MONAI, and `voxscale` is the binary under test): what it writes stays in that folder, never in the repo."""
import glob
import os
import re
import subprocess
import sys

import pytest

from conftest import ROOT, VOXSCALE

MARK = "<!-- runnable -->"
PAGES = [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
BLOCK_TIMEOUT_S = 120


def runnable_blocks():
    """(page, line, text) of every fenced block whose fence follows the marker line."""
    out = []
    for page in PAGES:
        lines = open(page, encoding="utf-8").read().split("\n")
        for i, line in enumerate(lines):
            if line.strip() != MARK:
                continue
            fence = lines[i + 1] if i + 1 < len(lines) else ""
            assert re.match(r"^```(sh|bash|console)?\s*$", fence), \
                "%s:%d: %s must be followed by a ```sh fence, not %r" % (page, i + 1, MARK, fence)
            body = []
            for j in range(i + 2, len(lines)):
                if lines[j].startswith("```"):
                    break
                body.append(lines[j])
            else:
                raise AssertionError("%s:%d: runnable block never closed" % (page, i + 2))
            out.append((os.path.relpath(page, ROOT), i + 3, "\n".join(body)))
    return out


BLOCKS = runnable_blocks()


def test_there_are_runnable_blocks():
    pages = {p for p, _, _ in BLOCKS}
    assert "README.md" in pages, "the README's examples must be runnable blocks"
    assert len(BLOCKS) >= 5, BLOCKS


@pytest.mark.parametrize("page,line,text", BLOCKS, ids=["%s:%d" % (p, l) for p, l, _ in BLOCKS])
def test_runnable_block(page, line, text, tmp_path):
    for name in ("configs", "bench", "tests", ".venv"):
        os.symlink(os.path.join(ROOT, name), tmp_path / name)
    (tmp_path / "build").mkdir()
    os.symlink(VOXSCALE, tmp_path / "build" / "voxscale")
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([os.path.join(ROOT, ".venv", "bin"), str(tmp_path / "build"), env.get("PATH", "")])
    env.pop("PYTHONPATH", None)
    script = "set -euo pipefail\n" + text + "\n"
    p = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=BLOCK_TIMEOUT_S)
    assert p.returncode == 0, "%s:%d: the documented block failed (exit %d):\n%s\n--- stdout\n%s\n--- stderr\n%s" % (
        page, line, p.returncode, text, p.stdout[-4000:], p.stderr[-4000:])


def slug(heading):
    """GitHub's anchor for a heading: lower case, punctuation but '-' and '_' dropped, spaces made '-'."""
    h = re.sub(r"<[^>]+>", "", heading.strip().lower())
    h = re.sub(r"[^\w\- ]", "", h)
    return h.replace(" ", "-")


def anchors(path):
    seen, out, fenced = {}, set(), False
    for line in open(path, encoding="utf-8"):
        if line.startswith("```"):
            fenced = not fenced
        m = None if fenced else re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            s = slug(m.group(1))
            n = seen.get(s, 0)
            seen[s] = n + 1
            out.add(s if n == 0 else "%s-%d" % (s, n))
    return out


def links(path):
    """(line, target) of every Markdown link and image outside code: [text](target)."""
    out, fenced = [], False
    for no, line in enumerate(open(path, encoding="utf-8"), 1):
        if line.startswith("```"):
            fenced = not fenced
            continue
        if fenced:
            continue
        line = re.sub(r"`[^`]*`", "", line)
        for m in re.finditer(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)", line):
            out.append((no, m.group(1)))
    return out


@pytest.mark.parametrize("page", PAGES, ids=[os.path.relpath(p, ROOT) for p in PAGES])
def test_relative_links_resolve(page):
    bad = []
    for no, target in links(page):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        dest = page if not path else os.path.normpath(os.path.join(os.path.dirname(page), path))
        if not os.path.exists(dest):
            bad.append("line %d: %s: no such file %s" % (no, target, os.path.relpath(dest, ROOT)))
        elif anchor and dest.endswith(".md") and anchor not in anchors(dest):
            bad.append("line %d: %s: no heading with anchor #%s in %s" % (no, target, anchor,
                                                                          os.path.relpath(dest, ROOT)))
    assert not bad, "%s:\n%s" % (os.path.relpath(page, ROOT), "\n".join(bad))


def test_readme_is_a_landing_page():
    text = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    n = text.count("\n")
    assert n < 400, "README.md has %d lines: keep it a landing page, move detail into docs/" % n
    assert "make run" in text and "make test" in text and ".ci/run" in text
    begin, end = text.count("<!-- measured:begin -->\n"), text.count("<!-- measured:end -->\n")
    assert begin == 1 and end == 1 and text.index("<!-- measured:begin -->") < text.index("<!-- measured:end -->")


def test_config_reference_is_generated():
    """docs/config-reference.md is what tools/gen_config_reference.py writes from this binary's --help-config."""
    p = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "gen_config_reference.py"), "--voxscale", VOXSCALE,
                        "--check"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr

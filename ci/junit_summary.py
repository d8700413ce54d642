#!/usr/bin/env python3
"""ci/junit_summary.py REPORT.xml [REPORT.xml...]: what ci/test.sh and ci/isa_sweep.sh read of pytest's JUnit reports
(ci/test.sh writes two: the tests run on xdist workers, then the timed ones alone), parsed once.

Prints, one per line:
  1. "TESTS FAILURES ERRORS SKIPPED" (the suite's counts, summed over the reports);
  2. the doc-tests' own count: "doc-tests (tests/integration/test_docs.py: README.md and docs/*.md): N run, N failed"
     (issue 36: a documented command that fails fails CI);
  3. then each failing or erroring case, "file::test: message" (its first 160 characters, one line), at most 10 and
     "... and N more": ci/test.sh's closing why: lines, since CI shows only the end of its output."""
import signal
import sys
import xml.etree.ElementTree as ET

signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # a reader that stops early (head) ends us quietly

counts, cases = [0, 0, 0, 0], []
for path in sys.argv[1:]:
    root = ET.parse(path).getroot()
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    for i, key in enumerate(("tests", "failures", "errors", "skipped")):
        counts[i] += int(suite.get(key))
    cases += root.iter("testcase")
print(*counts)

bad = [(c, b) for c in cases for b in list(c.findall("failure")) + list(c.findall("error"))]
docs = [c for c in cases if c.get("classname", "").endswith("test_docs")]
docs_bad = sum(1 for c in docs if c.find("failure") is not None or c.find("error") is not None)
print("doc-tests (tests/integration/test_docs.py: README.md and docs/*.md): %d run, %d failed" % (len(docs), docs_bad))
for c, b in bad[:10]:
    msg = (b.get("message") or "").replace("\n", " ")[:160]
    print("%s::%s: %s" % (c.get("classname", "").rsplit(".", 1)[-1], c.get("name"), msg))
if len(bad) > 10:
    print("... and %d more" % (len(bad) - 10))

#!/usr/bin/env python3
"""Tells whether every failed test of a ctest JUnit file failed only because LeakSanitizer's
own stop-the-world tracer crashed at process exit ("Tracer caught signal 11 ... LeakSanitizer
has encountered a fatal error"), a known intermittent fault of the sanitizer runtime
(google/sanitizers#1353) that says nothing about the code under test.

    lsan_tracer_flakes.py JUNIT_XML

Exit 0 (and the names on stdout) when there is at least one failure and every failure is that
crash with no sanitizer report beside it; exit 1 otherwise, so a real failure is never rerun
away. scripts/sanitize.sh reruns such tests once.
"""
import sys
import xml.etree.ElementTree as ET

TRACER = ("Tracer caught signal", "LeakSanitizer has encountered a fatal error")
# Anything a sanitizer reports about the code itself: never a flake.
REPORTS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer: detected memory leaks", "runtime error:")


def main(path):
    failed = [tc for tc in ET.parse(path).getroot().iter("testcase") if tc.get("status") == "fail"]
    if not failed:
        return 1
    for tc in failed:
        out = "".join(tc.itertext())
        if not all(s in out for s in TRACER) or any(s in out for s in REPORTS):
            return 1
    for tc in failed:
        print(tc.get("name"))
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1]))

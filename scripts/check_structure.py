#!/usr/bin/env python3
"""Fail when a source file or a function grows past what one reader can hold
(scripts/test.sh runs this, beside check_layers.py).

Three rules, over every crate's src/ and tests/:

1. No file holds more than MAX_FILE_LINES lines of code (blank lines and comments do not count).
2. No function body runs past MAX_FN_LINES lines of code, unless it is listed in ALLOWED below
   with the reason it stays whole. A listed function that is cut down or removed must leave the
   list (the check says so), so the list only shrinks.

3. No template parameter is read by its string name (`p.get("messageFormat")`,
   `.flag(..)`, `.was_given(..)`, `.parsed(..)`, `.defines(..)`) outside the templates crate:
   the runner reads parameters through `flexrun_templates::typed`, generated from the
   YAML, so a misspelt name fails to compile and each default lives only in the YAML.

Functions are found by `fn name` at the start of a line and measured to their closing brace,
ignoring braces inside strings, character literals and comments. Prints every violation and
exits 1, or prints one line and exits 0.
"""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
CRATES = ["autoscaler", "estimator", "generator", "runner", "simulate", "templates", "web"]
MAX_FILE_LINES = 800
MAX_FN_LINES = 100

# (file, function): why it stays one function.
ALLOWED = {
    ("web/tests/browser.rs", "the_estimate_page_and_a_job_page_render_with_charts"):
        "one headless-browser session walks the pages in order; each step depends on the last",
}

FN = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?(?:async\s+)?(?:unsafe\s+)?(?:const\s+)?fn\s+([A-Za-z0-9_]+)")
STRIP = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)\'|//.*')


def is_code(line):
    s = line.strip()
    return bool(s) and not s.startswith("//")


def functions(lines):
    """(name, code lines) of each function with a body."""
    i = 0
    while i < len(lines):
        m = FN.match(lines[i])
        if not m:
            i += 1
            continue
        depth, started, j = 0, False, i
        while j < len(lines):
            for ch in STRIP.sub("", lines[j]):
                if ch == "{":
                    depth, started = depth + 1, True
                elif ch == "}":
                    depth -= 1
            if started and depth <= 0:
                break
            if not started and lines[j].rstrip().endswith(";"):
                break
            j += 1
        if started:
            yield m.group(1), sum(1 for l in lines[i : j + 1] if is_code(l))
            i = j + 1
        else:
            i += 1


PARAM_NAME = re.compile(r"^  - name: (\w+)", re.M)
READ_BY_NAME = re.compile(r'\.(?:get|flag|was_given|defines|parsed(?:::<[^>]+>)?)\("(\w+)"')


def parameter_names():
    """Every parameter name any template YAML defines."""
    names = set()
    for y in (ROOT / "templates").glob("*.yaml"):
        names.update(PARAM_NAME.findall(y.read_text(encoding="utf-8")))
    return names


def reads_by_name(problems):
    names = parameter_names()
    for crate in CRATES:
        if crate == "templates":
            continue
        for path in sorted((ROOT / crate / "src").rglob("*.rs")):
            rel = path.relative_to(ROOT).as_posix()
            for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                for name in READ_BY_NAME.findall(line):
                    if name in names and not line.strip().startswith("//"):
                        problems.append(f"{rel}:{n}: reads parameter {name} by its string name: use flexrun_templates::typed")


def main():
    problems, seen = [], set()
    for crate in CRATES:
        for path in sorted((ROOT / crate).glob("**/*.rs")):
            rel = str(path.relative_to(ROOT))
            if "/target/" in f"/{rel}":
                continue
            lines = path.read_text(encoding="utf-8").splitlines()
            n = sum(1 for l in lines if is_code(l))
            if n > MAX_FILE_LINES:
                problems.append(f"{rel}: {n} lines of code, over {MAX_FILE_LINES}: split it by role")
            for name, length in functions(lines):
                if length <= MAX_FN_LINES:
                    continue
                if (rel, name) in ALLOWED:
                    seen.add((rel, name))
                    continue
                problems.append(f"{rel}: fn {name} is {length} lines, over {MAX_FN_LINES}: cut it along its steps, or list it in scripts/check_structure.py with the reason it stays whole")
    reads_by_name(problems)
    for rel, name in sorted(set(ALLOWED) - seen):
        problems.append(f"{rel}: fn {name} is listed in scripts/check_structure.py but is no longer over {MAX_FN_LINES} lines (or is gone): take it off the list")
    if problems:
        print("\n".join(problems))
        sys.exit(1)
    print(f"structure: no file over {MAX_FILE_LINES} lines of code, no function over {MAX_FN_LINES} but {len(ALLOWED)} listed, no parameter read by name")


if __name__ == "__main__":
    main()

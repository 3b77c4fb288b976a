#!/usr/bin/env python3
"""Every citation of the recovery protocol resolves in docs/protocol.md.

  python3 tests/docs/check_protocol_refs.py [REPO_ROOT]

Scans the repository's code, tests, scripts and docs (the files git tracks or would track)
and fails, naming file:line, when
  * a rule label (R<n>, D<n>) is not a heading of docs/protocol.md;
  * a step cited next to protocol.md ("docs/protocol.md step 4", "steps 2-7", "recovery 4
    and 7"), or anywhere as "recovery step(s) N", is not one of its "Step N" headings;
  * a quoted section cited right after protocol.md ("Whole-job failure") is neither a
    heading nor a term the page defines in bold;
  * a link protocol.md#anchor names no heading;
  * the old design page outside the repository is cited instead of docs/protocol.md.
Exit 0 when everything resolves, 1 otherwise. Standard library only.
"""
import os
import re
import subprocess
import sys

PAGE = os.path.join("docs", "protocol.md")
OLD_PAGE = "PROTOCOL" + ".md"  # spelled apart so this file does not cite it
SELF = os.path.join("tests", "docs", "check_protocol_refs.py")

TEXT_SUFFIXES = (".cpp", ".cc", ".c", ".h", ".hpp", ".cu", ".cuh", ".py", ".md", ".txt", ".sh", ".cmake",
                 ".json", ".toml", ".yml", ".yaml")

LABEL = re.compile(r"\b([RD])([0-9]+)\b")
NUM_LIST = r"([0-9]+(?:\s*(?:[-–,]|and|to)\s*[0-9]+)*)"
STEP_NEAR_PAGE = re.compile(r"\b(?:recovery\s+)?steps?\s+" + NUM_LIST + r"|\brecovery\s+" + NUM_LIST)
STEP_ANYWHERE = re.compile(r"\brecovery\s+steps?\s+" + NUM_LIST)
QUOTED_SECTION = re.compile(r"^(?:'s)?\s*\(?\s*\"([^\"]+)\"")
ANCHOR = re.compile(r"protocol\.md#([\w-]+)")
COMMENT_LEAD = re.compile(r"^\s*(?://+|#+|\*+|--)?\s*")


def slug(heading):
    """The anchor GitHub gives a heading."""
    text = re.sub(r"`", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def definitions(page_text):
    """(labels, steps, sections, anchors) that docs/protocol.md defines."""
    labels, steps, sections, anchors = set(), set(), set(), set()
    seen = {}
    in_code = False
    for line in page_text.splitlines():
        if line.lstrip().startswith("```"):
            in_code = not in_code
            continue
        m = None if in_code else re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            text = m.group(1)
            sections.add(" ".join(text.lower().split()))
            head = re.match(r"^([RD][0-9]+)\b", text)
            if head:
                labels.add(head.group(1))
            step = re.match(r"^Step\s+([0-9]+)\b", text)
            if step:
                steps.add(int(step.group(1)))
            base = slug(text)
            n = seen.get(base, 0)
            anchors.add(base if n == 0 else f"{base}-{n}")
            seen[base] = n + 1
        for term in re.findall(r"\*\*([^*]+)\*\*", line):
            sections.add(" ".join(term.lower().split()))
    return labels, steps, sections, anchors


def numbers(spec):
    """'2-7' -> 2..7, '4, 6 and 7' -> 4, 6, 7."""
    out = []
    parts = re.split(r"\s*(?:,|and)\s*", spec.strip())
    for p in parts:
        r = re.match(r"^([0-9]+)\s*(?:[-–]|to)\s*([0-9]+)$", p)
        if r:
            lo, hi = int(r.group(1)), int(r.group(2))
            out += list(range(lo, hi + 1)) if lo <= hi else [lo, hi]
        elif p.isdigit():
            out.append(int(p))
    return out


def citation_window(lines, i, start):
    """The text after a mention of protocol.md: the rest of the line and the next line
    (without its comment marker), up to the end of the sentence or of the enclosing
    parenthesis."""
    nxt = COMMENT_LEAD.sub("", lines[i + 1]) if i + 1 < len(lines) else ""
    text = lines[i][start:].rstrip() + " " + nxt
    depth = 0
    for k, ch in enumerate(text):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth < 0:
                return text[:k]
        elif ch == ";" or (ch == "." and (k + 1 == len(text) or text[k + 1] == " ")):
            return text[:k]
        if k > 200:
            return text[:k]
    return text


def candidate_files(root):
    """Relative paths: the files git tracks or would track (so build outputs, logs and
    anything .gitignore names are left out); without git, a walk that skips build*/ and
    hidden folders."""
    try:
        out = subprocess.run(["git", "-C", root, "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                             capture_output=True, check=True).stdout
        return sorted(set(p for p in out.decode("utf-8", "replace").split("\0") if p))
    except (OSError, subprocess.CalledProcessError):
        found = []
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = [d for d in dirnames if not d.startswith(".") and not d.startswith("build")]
            found += [os.path.relpath(os.path.join(dirpath, n), root) for n in filenames]
        return sorted(found)


def scanned_files(root):
    for rel in candidate_files(root):
        path = os.path.join(root, rel)
        name = os.path.basename(rel)
        if rel == SELF or not os.path.isfile(path):
            continue
        if name == "CMakeLists.txt" or name.endswith(TEXT_SUFFIXES):
            yield rel, path
        elif "." not in name:
            try:
                with open(path, "rb") as f:
                    if f.read(2) == b"#!":
                        yield rel, path
            except OSError:
                pass


def check(root):
    page_path = os.path.join(root, PAGE)
    if not os.path.isfile(page_path):
        return [f"{PAGE}: missing: code and docs cite it"], 0
    with open(page_path, encoding="utf-8") as f:
        labels, steps, sections, anchors = definitions(f.read())
    errors, cited = [], 0

    for rel, path in scanned_files(root):
        try:
            with open(path, encoding="utf-8") as f:
                lines = f.read().splitlines()
        except (UnicodeDecodeError, OSError):
            continue
        for i, line in enumerate(lines):
            where = f"{rel}:{i + 1}"
            if OLD_PAGE in line:
                errors.append(f"{where}: cites {OLD_PAGE}, which is outside the repository: cite {PAGE}")
            for m in LABEL.finditer(line):
                cited += 1
                if m.group(0) not in labels:
                    errors.append(f"{where}: {m.group(0)} is not defined in {PAGE}")
            for m in STEP_ANYWHERE.finditer(line):
                cited += 1
                for n in numbers(m.group(1)):
                    if n not in steps:
                        errors.append(f"{where}: recovery step {n} is not defined in {PAGE}")
            for m in ANCHOR.finditer(line):
                cited += 1
                if m.group(1) not in anchors:
                    errors.append(f"{where}: {PAGE} has no heading with the anchor #{m.group(1)}")
            for m in re.finditer(r"protocol\.md", line):
                window = citation_window(lines, i, m.end())
                for s in STEP_NEAR_PAGE.finditer(window):
                    cited += 1
                    for n in numbers(s.group(1) or s.group(2)):
                        if n not in steps:
                            errors.append(f"{where}: step {n} is not defined in {PAGE}")
                q = QUOTED_SECTION.match(window)
                if q:
                    cited += 1
                    name = " ".join(q.group(1).lower().split())
                    if name not in sections:
                        errors.append(f"{where}: \"{q.group(1)}\" is neither a heading nor a term of {PAGE}")
    return sorted(set(errors)), cited


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                           os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    errors, cited = check(root)
    for e in errors:
        print(e)
    if errors:
        print(f"check_protocol_refs: {len(errors)} citation(s) of {PAGE} do not resolve")
        return 1
    print(f"check_protocol_refs: {cited} citations, all defined in {PAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

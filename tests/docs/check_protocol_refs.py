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
  * the old design page outside the repository is cited instead of docs/protocol.md;
  * the last section's table (rule -> code -> tests) names, in its "implemented in" column,
    a file that does not exist or a function that does not occur where it says (see
    table_errors).
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


TABLE_HEAD = re.compile(r"^\|\s*rule\s*\|\s*implemented in\s*\|")
CODE_SPAN = re.compile(r"`([^`]+)`")
SOURCE_SUFFIXES = (".cpp", ".cc", ".h", ".hpp", ".cu", ".cuh")


def table_rows(page_text):
    """(line number, rule, "implemented in" cell) for each row of the rule -> code -> tests
    table."""
    rows, in_table = [], False
    for n, line in enumerate(page_text.splitlines(), 1):
        if TABLE_HEAD.match(line):
            in_table = True
            continue
        if in_table and not line.startswith("|"):
            break
        if in_table and not re.match(r"^\|[-|\s]+\|$", line):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cells) >= 2:
                rows.append((n, cells[0], cells[1]))
    return rows


COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
AFTER_PARAMS = re.compile(r"^\s*(?:(?:const|noexcept|override|final|mutable)\b\s*|->\s*[\w:<>,\s*&]+?(?=\{))*\{")


def matching_paren(text, i):
    """Index just past the parenthesis that closes the one at text[i]."""
    depth = 0
    for k in range(i, len(text)):
        if text[k] == "(":
            depth += 1
        elif text[k] == ")":
            depth -= 1
            if depth == 0:
                return k + 1
    return len(text)


def defines_function(code, name):
    """`name(...)` followed by its body: a definition, not a call."""
    for m in re.finditer(r"\b" + re.escape(name) + r"\s*\(", code):
        if AFTER_PARAMS.match(code[matching_paren(code, m.end() - 1):]):
            return True
    return False


def declares(code, name):
    """A header names a function (`name(`) or defines a type `name`."""
    return (re.search(r"\b" + re.escape(name) + r"\s*\(", code) is not None or
            re.search(r"\b(?:class|struct|enum class|enum|using)\s+" + re.escape(name) + r"\b(?!\s*;)", code)
            is not None)


class Sources:
    """The tracked C++ sources without their comments, read once, to look names up in."""

    def __init__(self, root):
        self.root = root
        self.code = {}
        for rel in candidate_files(root):
            if rel.endswith(SOURCE_SUFFIXES):
                self.read(rel)

    def read(self, rel):
        if rel not in self.code:
            try:
                with open(os.path.join(self.root, rel), encoding="utf-8") as f:
                    self.code[rel] = COMMENT.sub(" ", f.read())
            except (UnicodeDecodeError, OSError):
                self.code[rel] = None
        return self.code[rel]

    def file_has(self, rel, name):
        """A header declares `name`; a source file defines it (a body, not a call)."""
        code = self.read(rel)
        if code is None:
            return False
        if rel.endswith((".h", ".hpp", ".cuh")):
            return declares(code, name)
        return defines_function(code, name) or declares(code, name) and name[:1].isupper()

    def member_exists(self, qualifier, name):
        """`Qual::name(` is written out somewhere (an out-of-line definition), or a file
        that defines the class, struct or namespace `Qual` (its last component:
        `Trainer::Impl` -> `Impl`) declares `name`."""
        spelled = re.compile(r"\b" + re.escape(qualifier) + r"::" + re.escape(name) + r"\s*\(")
        last = qualifier.split("::")[-1]
        defines = re.compile(r"\b(?:class|struct|namespace)\s+(?:\w+::)*" + re.escape(last) + r"\b(?!\s*;)")
        return any(code and (spelled.search(code) or (defines.search(code) and declares(code, name)))
                   for code in self.code.values())

    def type_exists(self, name):
        return any(code and declares(code, name) and
                   re.search(r"\b(?:class|struct|enum|using)\s+" + re.escape(name) + r"\b(?!\s*;)", code)
                   for code in self.code.values())

    def function_exists(self, name):
        return any(code and defines_function(code, name) for code in self.code.values())


def defined_or_declared(rel):
    return "declared" if rel.endswith((".h", ".hpp", ".cuh")) else "defined"


def is_path(token):
    return "/" in token or token.endswith(SOURCE_SUFFIXES)


def table_errors(root, page_text, sources):
    """Each code span of an "implemented in" cell, read left to right:
      * a path (`ddp/train_step.cpp`) must exist; a bare file name (`allreduce_zero_copy.cpp`
        after `comm/allreduce_ring.cpp`) is looked for in the previous path's folder;
      * a name right after a path (`ddp/train_step.cpp` `train_generation`) must be
        defined there (a body, not a call) when the file is a source file, declared when it
        is a header;
      * `Class::member` elsewhere must be defined (Sources.member_exists); a lower-case
        name after it (`Reducer::finish`/`abandon`) is a member of the same class, and after
        a path and its name (`elastic/plan.h` `make_plan`, `decide_shrink_from`) one more
        name in that file;
      * a capitalised name alone (`Trainer`) must be a type defined somewhere."""
    errors = []
    for n, rule, cell in table_rows(page_text):
        where = f"{PAGE}:{n} ({rule})"
        path, qualifier, prev_end, prev_kind = None, None, None, None
        for m in CODE_SPAN.finditer(cell):
            token = m.group(1).strip()
            adjacent = prev_end is not None and cell[prev_end:m.start()].strip() == ""
            prev_was_path = adjacent and prev_kind == "path"
            if is_path(token):
                rel = token if "/" in token or path is None else os.path.join(os.path.dirname(path), token)
                if not os.path.isfile(os.path.join(root, rel)):
                    errors.append(f"{where}: {rel} does not exist")
                path, qualifier, prev_kind = rel, None, "path"
            else:
                name = token.split("::")[-1]
                qual = token.rsplit("::", 1)[0] if "::" in token else None
                if prev_was_path:
                    if not sources.file_has(path, name):
                        errors.append(f"{where}: {token} is not {defined_or_declared(path)} in {path}")
                    qualifier = qual
                elif qual is not None:
                    if not sources.member_exists(qual, name):
                        errors.append(f"{where}: {token} is not defined in any source file")
                    path, qualifier = None, qual
                elif name[:1].isupper():
                    if not sources.type_exists(name):
                        errors.append(f"{where}: no type {name} is defined in any source file")
                    path, qualifier = None, None
                elif qualifier is not None:
                    if not sources.member_exists(qualifier, name):
                        errors.append(f"{where}: {qualifier}::{name} is not defined in any source file")
                elif path is not None:
                    if not sources.file_has(path, name):
                        errors.append(f"{where}: {name} is not {defined_or_declared(path)} in {path}")
                elif not sources.function_exists(name):
                    errors.append(f"{where}: no function {name} in any source file")
                prev_kind = "name"
            prev_end = m.end()
    return errors


def check(root):
    page_path = os.path.join(root, PAGE)
    if not os.path.isfile(page_path):
        return [f"{PAGE}: missing: code and docs cite it"], 0
    with open(page_path, encoding="utf-8") as f:
        page_text = f.read()
    labels, steps, sections, anchors = definitions(page_text)
    errors, cited = table_errors(root, page_text, Sources(root)), len(table_rows(page_text))

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

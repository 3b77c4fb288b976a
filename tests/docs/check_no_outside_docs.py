#!/usr/bin/env python3
"""Nothing in the repository cites a document outside it.

  python3 tests/docs/check_no_outside_docs.py [REPO_ROOT]

The engineers' design and style notes live beside the repository, not in it: a reader of a
clone cannot open them. The design the code cites is docs/design.md, docs/architecture.md
and docs/protocol.md. This check reads every file git tracks or would track (so build
outputs and ignored files are left out) and fails, naming file:line, on a mention of those
notes or of the folder they live in. Exit 0 when there is none, 1 otherwise.
"""
import os
import re
import subprocess
import sys

# Spelled apart so that this file does not cite them itself.
OUTSIDE = ("DESIGN" + ".md", "STYLE" + ".md", "../" + "shared/")
PATTERN = re.compile("|".join(re.escape(x) for x in OUTSIDE))


def tracked_files(root):
    out = subprocess.run(["git", "-C", root, "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                         capture_output=True, check=True).stdout
    return sorted(set(p for p in out.decode("utf-8", "replace").split("\0") if p))


def citations(root):
    found = []
    for rel in tracked_files(root):
        path = os.path.join(root, rel)
        if not os.path.isfile(path):
            continue
        try:
            with open(path, encoding="utf-8") as f:
                lines = f.read().splitlines()
        except (UnicodeDecodeError, OSError):
            continue  # binary: images, data
        for i, line in enumerate(lines):
            for m in PATTERN.finditer(line):
                found.append(f"{rel}:{i + 1}: cites {m.group(0)}, which is outside the repository")
    return found


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                           os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    try:
        found = citations(root)
    except (OSError, subprocess.CalledProcessError) as e:
        print(f"check_no_outside_docs: cannot list the repository's files with git: {e}")
        return 1
    for line in found:
        print(line)
    if found:
        print(f"check_no_outside_docs: {len(found)} citation(s) of documents outside the repository: "
              "cite docs/design.md, docs/architecture.md or docs/protocol.md instead")
        return 1
    print("check_no_outside_docs: no file cites a document outside the repository")
    return 0


if __name__ == "__main__":
    sys.exit(main())

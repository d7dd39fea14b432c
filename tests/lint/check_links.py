#!/usr/bin/env python3
"""Relative links of the README and the docs: each names a file that exists
and, with a #fragment, a heading of that file (GitHub's anchors: lower
case, punctuation but hyphens dropped, spaces to hyphens).

usage: check_links.py ROOT
"""
import glob
import os
import re
import sys

LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")


def anchors(path):
    found, seen = set(), {}
    in_code = False
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("```"):
                in_code = not in_code
            if in_code or not line.startswith("#"):
                continue
            text = line.lstrip("#").strip()
            slug = re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            found.add(slug if n == 0 else f"{slug}-{n}")
    return found


def main():
    root = os.path.abspath(sys.argv[1])
    pages = [os.path.join(root, "README.md"), os.path.join(root, "traces", "SCHEMA.md")]
    pages += sorted(glob.glob(os.path.join(root, "docs", "**", "*.md"), recursive=True))
    bad = 0
    for page in pages:
        in_code = False
        with open(page, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if line.startswith("```"):
                    in_code = not in_code
                if in_code:
                    continue
                for m in LINK.finditer(line):
                    target = m.group(1) or m.group(2)
                    if re.match(r"^[a-z]+:", target):
                        continue  # http(s), mailto: not checked here
                    path, _, fragment = target.partition("#")
                    dest = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
                    where = f"{os.path.relpath(page, root)}:{n}"
                    if not os.path.exists(dest):
                        print(f"FAIL: {where}: link to {target}: no such file")
                        bad += 1
                    elif fragment and dest.endswith(".md") and fragment not in anchors(dest):
                        print(f"FAIL: {where}: link to {target}: no heading with that anchor")
                        bad += 1
    print(f"{len(pages)} pages, {bad} broken links")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""One job per room, kept so: no source file over 700 lines, and no function
over 100 lines in the libraries, the CLI and the benchmarks (the schedule
interpreters keep one handler per action kind). Exits 1 listing every
offender."""
import re
import sys
from pathlib import Path

MAX_FILE_LINES = 700
MAX_FUNCTION_LINES = 100
ALLOWED = set()  # (file, function) pairs allowed past the bound: none
SOURCE_DIRS = ["planner", "sim", "exec", "traces", "cli", "bench", "tests"]
FUNCTION_DIRS = ["planner", "sim", "exec", "traces", "cli", "bench"]
CONTROL = {"if", "for", "while", "switch", "catch", "do", "else", "try", "return", "sizeof", "decltype"}


def strip(text):
    """Comments, string and character literals blanked, newlines kept."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("\n" * text.count("\n", i, j))
            i = j
        elif text.startswith('R"', i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'R"([^(\s]*)\(', text[i:])
            end = text.find(")" + m.group(1) + '"', i) if m else -1
            j = n if end < 0 else end + len(m.group(1)) + 2
            out.append('""' + "\n" * text.count("\n", i, j))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(c + c)
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def function_name(header):
    """The function a brace opens, or None (class, namespace, lambda, block)."""
    h = " ".join(header.split())
    if not h or re.search(r"\b(namespace|class|struct|enum|union)\b[^()]*$", h):
        return None
    # Constructors' initialiser lists: cut at the ') :' that starts them.
    m = re.match(r"(.*?\))\s*:\s*[\w:]+\s*[({].*$", h)
    if m:
        h = m.group(1)
    if not re.search(r"\)\s*(const|override|final|noexcept|mutable|&|&&|\s|->\s*[\w:<>,\s*&]+)*$", h):
        return None
    m = re.search(r"([~\w:]+|operator\s*\S+)\s*\(", h)
    if not m:
        return None
    name = m.group(1).split("::")[-1]
    before = h[: m.start()]
    if name in CONTROL or "]" in before[-3:] or re.search(r"[=,(\[]\s*$", before):
        return None
    return name


def long_functions(path, rel):
    text = strip(path.read_text(errors="replace"))
    stack, header, line = [], [], 1
    found = []
    for c in text:
        if c == "\n":
            line += 1
        if c == "{":
            stack.append((function_name("".join(header)), line))
            header = []
        elif c == "}":
            if stack:
                name, start = stack.pop()
                if name and line - start + 1 > MAX_FUNCTION_LINES and (rel, name) not in ALLOWED:
                    found.append(f"{rel}:{start}: {name} has {line - start + 1} lines (at most {MAX_FUNCTION_LINES})")
            header = []
        elif c == ";":
            header = []
        else:
            header.append(c)
    return found


def main():
    root = Path(sys.argv[1] if len(sys.argv) > 1 else ".")
    problems = []
    for d in SOURCE_DIRS:
        for p in sorted((root / d).rglob("*")):
            if p.suffix not in (".cpp", ".hpp") or not p.is_file():
                continue
            rel = p.relative_to(root).as_posix()
            lines = p.read_text(errors="replace").count("\n")
            if lines > MAX_FILE_LINES:
                problems.append(f"{rel}: {lines} lines (at most {MAX_FILE_LINES}: split it by job)")
            if d in FUNCTION_DIRS:
                problems += long_functions(p, rel)
    for p in problems:
        print(p)
    if problems:
        return 1
    print(f"check_sizes: every file <= {MAX_FILE_LINES} lines, every function <= {MAX_FUNCTION_LINES} lines")
    return 0


if __name__ == "__main__":
    sys.exit(main())

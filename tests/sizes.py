#!/usr/bin/env python3
"""The code's sizes held to the limits the house keeps (README.md, "Where things are"): no function in core/ or
baselines/ longer than 120 lines, no file there longer than 450 lines, none in scripts/ longer than
500; and one Markdown table writer in scripts/ (plots/tables.py): no table separator written
elsewhere. Functions are found from the code's braces (comments and strings set aside): a brace that
follows a parameter list outside any function opens one; lambdas and blocks inside count as its
lines. Exit 1 naming each that is over, with its FILE:LINE.

    tests/sizes.py [ROOT]
"""
import os
import re
import sys

FUNCTION_LINES, CORE_FILE_LINES, SCRIPT_FILE_LINES = 120, 450, 500


def strip(src):
    # remove comments, strings, raw strings, char literals; keep newlines
    out = []; i = 0; n = len(src)
    while i < n:
        c = src[i]
        if src.startswith('//', i):
            j = src.find('\n', i); j = n if j < 0 else j; i = j; continue
        if src.startswith('/*', i):
            j = src.find('*/', i); j = n if j < 0 else j + 2; out.append('\n' * src[i:j].count('\n')); i = j; continue
        m = re.match(r'R"([^(]*)\(', src[i:i+20])
        if m:
            end = ')' + m.group(1) + '"'; j = src.find(end, i + m.end()); j = n if j < 0 else j + len(end)
            out.append('""' + '\n' * src[i:j].count('\n')); i = j; continue
        if c == '"' or (c == "'" and not (i > 0 and src[i-1].isalnum())):
            j = i + 1
            while j < n and src[j] != c:
                j += 2 if src[j] == '\\' else 1
            out.append('""'); i = j + 1; continue
        out.append(c); i += 1
    return ''.join(out)
def scan(path):
    s = strip(open(path, errors='replace').read())
    res = []
    stack = []  # kinds: 'ns', 'cls', 'fn', 'blk'
    line = 1; last = 0
    for i, c in enumerate(s):
        if c == '\n': line += 1
        elif c == '{':
            head = s[last:i]
            h = head.strip()
            kind = 'blk'
            if not any(k == 'fn' for k, _, _ in stack):
                if re.search(r'\bnamespace\b', h) or h.startswith('extern "'):
                    kind = 'ns'
                elif re.search(r'\b(class|struct|union|enum)\b[^()]*$', h) and not h.endswith(')'):
                    kind = 'cls'
                elif re.search(r'\)\s*(const)?\s*(override|noexcept|final)?\s*(->\s*[\w:<>,\s*&]+)?\s*$', h) or re.search(r'\)\s*:\s*[\s\S]*\)\s*$', h):
                    kind = 'fn'
            name = re.sub(r'\s+', ' ', h.split(';')[-1].split('}')[-1]).strip()[:100]
            stack.append((kind, line, name))
            last = i + 1
        elif c == '}':
            if stack:
                kind, l0, name = stack.pop()
                if kind == 'fn':
                    # start line: first non-empty line of its header
                    res.append((line - l0 + 1 + name.count('\n'), path, l0, name))
            last = i + 1
        elif c == ';':
            last = i + 1
    return res


def code_files(root, folders, exts):
    for folder in folders:
        for d, _, fs in os.walk(os.path.join(root, folder)):
            for f in sorted(fs):
                if f.endswith(exts) or (exts == "script" and not os.path.splitext(f)[1] and not f.startswith(".")):
                    yield os.path.join(d, f)


def main(argv):
    root = argv[1] if len(argv) > 1 else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    over = []
    for path in code_files(root, ["core", "baselines"], (".cpp", ".h", ".cu")):
        rel = os.path.relpath(path, root)
        n = sum(1 for _ in open(path, errors="replace"))
        if n > CORE_FILE_LINES:
            over.append(f"{rel}:1: {n} lines, more than {CORE_FILE_LINES} in a file of core/ or baselines/")
        for lines, _, line, name in scan(path):
            if lines > FUNCTION_LINES:
                over.append(f"{rel}:{line}: {name}: {lines} lines, more than {FUNCTION_LINES} in a function")
    for path in list(code_files(root, ["scripts"], (".py",))) + list(code_files(root, ["scripts"], "script")):
        rel = os.path.relpath(path, root)
        n = sum(1 for _ in open(path, errors="replace"))
        if n > SCRIPT_FILE_LINES:
            over.append(f"{rel}:1: {n} lines, more than {SCRIPT_FILE_LINES} in a file of scripts/")
        if rel != os.path.join("scripts", "plots", "tables.py"):
            for i, text in enumerate(open(path, errors="replace"), 1):
                if re.search(r"\|-{3}|-{3}\|", text):
                    over.append(f"{rel}:{i}: a Markdown table written by hand: use plots/tables.py's markdown()")
    for o in over:
        print(o, file=sys.stderr)
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

#!/usr/bin/env bash
# tests/check_links.sh: the repository stands on its own. For README.md, docs/*.md,
# bench/README.md, tools/README.md and configs/README.md it checks that
#  - every relative markdown link [text](path#anchor) resolves to a file or folder inside
#    the repository, and its #anchor (if any) to a heading of the target (GitHub's slugs);
#  - every mention of a markdown file in the text (`docs/ZERO.md`, DESIGN.md) names one
#    that is in the repository;
#  - nothing points outside it: no ../shared, no absolute /work/ path, no link that
#    leaves the repository root.
# Web links (http, https, mailto) are not followed. Prints OK / NOT OK per link and ends
# with "N passed, M failed"; exits non-zero on any failure. Needs python3 (standard library).
set -u
cd "$(dirname "$0")/.." || exit 2
files=(README.md docs/*.md bench/README.md tools/README.md configs/README.md)
python3 - "${files[@]}" <<'EOF'
import os, re, sys

root = os.path.realpath(".")
passed = failed = 0

def check(ok, what):
    global passed, failed
    print(("OK     " if ok else "NOT OK ") + what)
    if ok: passed += 1
    else: failed += 1

def strip_code(text):
    """(prose lines with inline code removed, all lines) -- links in code are not links"""
    prose, fenced = [], False
    for line in text.split("\n"):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            prose.append("")
            continue
        prose.append("" if fenced else re.sub(r"`[^`]*`", lambda m: " " * len(m.group(0)), line))
    return prose

def slug(heading):
    # GitHub: drop markup, lower-case, keep letters, digits, '_', '-' and spaces; spaces -> '-'
    h = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    h = re.sub(r"<[^>]+>", "", h).strip().lower()
    h = re.sub(r"[^\w\- ]", "", h)
    return h.replace(" ", "-")

anchor_cache = {}
def anchors(path):
    if path not in anchor_cache:
        seen, out = {}, set()
        with open(path, encoding="utf-8") as f:
            text = f.read()
        fenced = False
        for line in text.split("\n"):
            if line.lstrip().startswith("```"):
                fenced = not fenced
            if fenced: continue
            m = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
            if m:
                s = slug(m.group(1))
                n = seen.get(s, 0)
                seen[s] = n + 1
                out.add(s if n == 0 else f"{s}-{n}")
            for a in re.findall(r'<a\s+(?:name|id)="([^"]+)"', line):
                out.add(a)
        anchor_cache[path] = out
    return anchor_cache[path]

def inside(path):
    real = os.path.realpath(path)
    return real == root or real.startswith(root + os.sep)

for md in sys.argv[1:]:
    if not os.path.exists(md):
        check(False, f"{md}: file is missing")
        continue
    with open(md, encoding="utf-8") as f:
        text = f.read()
    raw = text.split("\n")
    prose = strip_code(text)
    base = os.path.dirname(md)
    for no, line in enumerate(prose, 1):
        # inline links and images; reference definitions [x]: target
        targets = [m.group(1) for m in re.finditer(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)", line)]
        targets += [m.group(1) for m in re.finditer(r"^\s*\[[^\]]+\]:\s*(\S+)", line)]
        for t in targets:
            where = f"{md}:{no}: link {t}"
            if re.match(r"^(https?|mailto|ftp):", t):
                continue
            path, _, anchor = t.partition("#")
            if path.startswith("/") or "/work/" in path:
                check(False, where + " is an absolute path (outside the repository)")
                continue
            full = os.path.normpath(os.path.join(base, path)) if path else md
            if not inside(full):
                check(False, where + " points outside the repository")
                continue
            if not os.path.exists(full):
                check(False, where + " does not exist")
                continue
            if anchor:
                if os.path.isfile(full) and full.endswith(".md"):
                    ok = anchor in anchors(full)
                    check(ok, where + ("" if ok else f" (no heading with slug '{anchor}' in {full})"))
                else:
                    check(False, where + " has an anchor but is not a markdown file")
            else:
                check(True, where)
    for no, line in enumerate(raw, 1):
        # anywhere, code included: no path that only exists next to this checkout
        for m in re.finditer(r"(\.\./)+shared\b[\w./-]*|(?<![\w.])/work/[\w./-]*", line):
            check(False, f"{md}:{no}: mentions {m.group(0)}, outside the repository")
        # mentions of markdown files: docs/ZERO.md, DESIGN.md ($OUT/x.md is an output, not a doc)
        text = re.sub(r"\]\([^)]*\)", "]", line)  # link targets: checked above
        text = re.sub(r"\w+://\S+", " ", text)  # web addresses
        for m in re.finditer(r"(?<![\w$/.-])([\w./-]*[\w-]\.md)\b", text):
            name = m.group(1)
            cands = [os.path.join(base, name), name, os.path.join("docs", name)]
            ok = any(os.path.isfile(c) and inside(c) for c in cands)
            check(ok, f"{md}:{no}: mention {name}" + ("" if ok else " is not a file of the repository"))

print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
EOF

#!/usr/bin/env bash
# The reference check (scripts/check-references.sh) on small planted trees:
# a clean tree passes; each kind of dangling reference, planted alone, fails
# naming its file and line; git's list of tracked files is what a checkout
# is checked by; TALLY_REFCHECK_SKIP leaves paths out.
#
#   bash scripts/check-references_test.sh
#
# The bad strings are put together at run time so that this file passes the
# check itself.
set -euo pipefail
check="$(cd "$(dirname "$0")" && pwd)/check-references.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
# The folder whose .md paths the check resolves from the root; written as
# $D (and DOCS in quoted text, replaced after writing) so that this file
# names no such path itself.
D=docs
undocs() { sed -i "s|DOCS/|$D/|g" "$@"; }

# A tree with no dangling reference, and things that look like one but are
# not: seeded exchanges, a seed of 0, a certificate Issue() call, links out,
# a link inside a code span and a code block, a docs/ path that exists.
good_tree() {
  local d=$1
  mkdir -p "$d/$D/design" "$d/src"
  printf '# Design\n\n## Sessions\n' > "$d/$D/design/overview.md"
  cat > "$d/README.md" <<'EOF'
# Project

See [the overview](DOCS/design/overview.md#sessions), [the top](#project),
[the site](https://example.org/x.md) and [mail](mailto:a@example.org).
![logo](DOCS/design/overview.md)

Inline code is no link: `[x](missing.md)`.

```
[also](not/a/link.md)
```

[ref]: DOCS/design/overview.md
EOF
  cat > "$d/$D/design/child.md" <<'EOF'
Up: [readme](../../README.md), sibling: [overview](overview.md "Overview").
EOF
  cat > "$d/src/a.cc" <<'EOF'
// A seeded exchange; seed = 0 draws a fresh one (DOCS/design/overview.md).
auto cert = ca->Issue("node");
// Issues a certificate; the 2026-12-04 release.
EOF
  undocs "$d/README.md" "$d/src/a.cc"
}

expect_pass() {  # expect_pass NAME DIR
  local out
  if ! out=$(bash "$check" "$2" 2>&1); then
    fail "$1: expected no hit, got: $out"
  fi
}
expect_hit() {  # expect_hit NAME DIR FILE:LINE
  local out rc=0
  out=$(bash "$check" "$2" 2>&1) || rc=$?
  if [ "$rc" -ne 1 ]; then
    fail "$1: expected exit 1, got $rc: $out"
  elif ! grep -q -F "$3:" <<< "$out"; then
    fail "$1: expected a hit at $3, got: $out"
  fi
}

good_tree "$tmp/good"
expect_pass "clean tree" "$tmp/good"

# Every bad line, planted in a copy of the clean tree between good ones
# (src/b.cc, bad lines at the even line numbers): each is reported by its
# own line number.
section=$'\xc2\xa7'
bad_lines=(
  "// Fixed for iss""ue 27."
  "// As in Iss""ue 13 ${section}4."
  "// (see ${section}2.6)"
  "# ISS""UES #8 and 9"
  "// as in see""d 000's lesson"
  "// what th""e brief asks"
  "// PG-DES""IGN says so"
  "// DES""IGN.md, step 3"
  "// ANCH""ORS.md"
  "// HOU""SE.md"
  "// MARIADB""-FACTS"
  "// ../sha""red/notes.md"
  "// $D/design/missing.md has it"
)
d=$tmp/bad
good_tree "$d"
for line in "${bad_lines[@]}"; do
  printf '// a good line\n%s\n' "$line"
done > "$d/src/b.cc"
out=$(bash "$check" "$d" 2>&1) && fail "planted lines: the check passed: $out"
n=0
for line in "${bad_lines[@]}"; do
  n=$((n + 2))
  grep -q -F "src/b.cc:$n:" <<< "$out" || fail "planted line $n not reported: $line"
  grep -q -F "src/b.cc:$((n - 1)):" <<< "$out" && fail "good line $((n - 1)) reported"
done

# Markdown links to files that do not exist, relative to the linking file.
d=$tmp/links
good_tree "$d"
printf 'ok\n[fine](overview.md)\n' > "$d/$D/design/x.md"
printf 'ok\nSee [gone](missing.md#part).\n' > "$d/$D/design/y.md"
expect_hit "link to a missing file" "$d" "$D/design/y.md:2"
d=$tmp/links2
good_tree "$d"
printf 'a\nb\n[r]: ../nowhere.md\n' > "$d/$D/z.md"
expect_hit "reference definition to a missing file" "$d" "$D/z.md:3"
d=$tmp/links3
good_tree "$d"
# Relative to the linking file, not to the root.
printf 'See [it](DOCS/design/overview.md).\n' > "$d/$D/design/w.md"
undocs "$d/$D/design/w.md"
expect_hit "link resolved from the root instead of the file" "$d" \
  "$D/design/w.md:1"

# A git checkout: the tracked files are checked, untracked ones are not.
if command -v git > /dev/null; then
  d=$tmp/repo
  good_tree "$d"
  git -C "$d" init -q
  git -C "$d" add -A
  printf 'x\n// iss''ue 4\n' > "$d/untracked.cc"
  expect_pass "untracked file in a checkout" "$d"
  git -C "$d" add untracked.cc
  expect_hit "tracked file in a checkout" "$d" "untracked.cc:2"
fi

# TALLY_REFCHECK_SKIP leaves out what it names, and only that.
d=$tmp/skip
good_tree "$d"
printf '// iss''ue 4\n' > "$d/src/b.cc"
if ! TALLY_REFCHECK_SKIP="src/b.cc" bash "$check" "$d" > /dev/null 2>&1; then
  fail "TALLY_REFCHECK_SKIP=src/b.cc still reports src/b.cc"
fi
if TALLY_REFCHECK_SKIP="README.md" bash "$check" "$d" > /dev/null 2>&1; then
  fail "TALLY_REFCHECK_SKIP=README.md hides src/b.cc"
fi

if [ "$failures" -ne 0 ]; then
  echo "check-references_test: $failures failure(s)" >&2
  exit 1
fi
echo "check-references_test: all cases pass"

#!/usr/bin/env bash
# Fails when a file of the repository points at something the repository
# does not hold, so that every reference a reader meets can be followed:
#
#  - numbered issues (the word issue followed by a number, or by # and a
#    number): the tracker is not part of a checkout, so a comment says the
#    fact or the reason instead;
#  - section signs, and the names of private design notes and reading
#    material that were never part of the repository;
#  - Markdown links [text](path) whose target file (its #fragment dropped)
#    does not exist relative to the linking file; http(s) and mailto links
#    are not followed;
#  - paths under docs/ that end in .md, named anywhere (code comments,
#    scripts, CMake), that do not exist from the repository's root.
#
#   bash scripts/check-references.sh [ROOT]
#
# ROOT defaults to the current directory. The files checked are the ones git
# tracks there (git ls-files), or, outside a git checkout, every file under
# ROOT but those in .git, .cache and the top-level build* directories. TALLY_REFCHECK_SKIP holds paths or
# path prefixes (space-separated, relative to ROOT) to leave out, for a local
# run while some files are still being rewritten:
#
#   TALLY_REFCHECK_SKIP="README.md docs/" bash scripts/check-references.sh
#
# Prints every hit as FILE:LINE: what: the line, and exits 1 if there is
# any, 0 if there is none, 2 on a usage error. The patterns below are
# written so that this file does not match them itself.
set -euo pipefail
export LC_ALL=C

root=${1:-.}
if [ ! -d "$root" ]; then
  echo "check-references: $root is not a directory" >&2
  exit 2
fi
cd "$root"

# The files to check, NUL-separated, relative to ROOT.
list=$(mktemp)
hits=$(mktemp)
trap 'rm -f "$list" "$list.all" "$hits"' EXIT
if top=$(git rev-parse --show-toplevel 2>/dev/null) &&
   [ "$(cd "$top" && pwd -P)" = "$(pwd -P)" ]; then
  git ls-files -z > "$list.all"
else
  find . -type d \( -name .git -o -name .cache -o -path './build*' \) -prune \
       -o -type f -print0 | sed -z 's|^\./||' > "$list.all"
fi
skip=${TALLY_REFCHECK_SKIP:-}
while IFS= read -r -d '' f; do
  [ -f "$f" ] || continue  # deleted in the work tree, still in the index
  for s in $skip; do
    case "$f" in "$s"|"$s"*) continue 2 ;; esac
  done
  printf '%s\0' "$f"
done < "$list.all" > "$list"
rm -f "$list.all"

# Text patterns. Each is split (a bracket around one letter, or bytes given
# in hex) so that this script does not contain what it looks for.
section=$'\xc2\xa7'
caseless=(
  "issue:\\b[i]ssues? #?[0-9]+"
  "section sign:${section}"
  "reading-material number:\\b[s]eeds? 0[0-9]"
  "private handout:\\b[t]he brief\\b"
  "private handout:[.][.]/[s]hared/"
  "private handout:/work/[s]hared"
)
exact=(
  "private design note:PG-[D]ESIGN"
  "private design note:\\b[D]ESIGN\\.md"
  "private note:\\b[A]NCHORS(\\.md)?\\b"
  "private note:\\b[H]OUSE\\.md"
  "private note:[M]ARIADB-FACTS"
)
scan() {  # scan FLAGS WHAT:REGEX
  local flags=$1 what=${2%%:*} regex=${2#*:}
  [ -s "$list" ] || return 0
  xargs -0 grep -I -H -n $flags -E -e "$regex" -- < "$list" 2>/dev/null |
    while IFS= read -r line; do
      file=${line%%:*}; rest=${line#*:}; num=${rest%%:*}; text=${rest#*:}
      printf '%s:%s: %s: %s\n' "$file" "$num" "$what" "$text"
    done >> "$hits" || true
}
for p in "${caseless[@]}"; do scan -i "$p"; done
for p in "${exact[@]}"; do scan "" "$p"; done

# Markdown links. Fenced code blocks and `code spans` are not links.
while IFS= read -r -d '' f; do
  case "$f" in *.md|*.markdown) ;; *) continue ;; esac
  dir=$(dirname "$f")
  awk '
    /^[ \t]*(```|~~~)/ { fenced = !fenced; next }
    fenced { next }
    {
      line = $0
      gsub(/`[^`]*`/, "", line)
      # Inline links and images: ](target) or ](target "title").
      while (match(line, /\]\([^)]*\)/)) {
        print NR "\t" substr(line, RSTART + 2, RLENGTH - 3)
        line = substr(line, RSTART + RLENGTH)
      }
      # Reference definitions: [label]: target
      if (match($0, /^ ? ? ?\[[^]]+\]:[ \t]+[^ \t]+/)) {
        def = substr($0, RSTART, RLENGTH)
        sub(/^ ? ? ?\[[^]]+\]:[ \t]+/, "", def)
        print NR "\t" def
      }
    }' "$f" |
  while IFS=$'\t' read -r num target; do
    target=${target%% \"*}          # a title after the target
    target=${target#<}; target=${target%>}
    case "$target" in
      ''|'#'*|*://*|mailto:*|tel:*) continue ;;
    esac
    path=${target%%#*}
    path=${path%%\?*}
    path=${path//%20/ }
    [ -n "$path" ] || continue
    case "$path" in
      /*) resolved=".$path" ;;
      *) resolved="$dir/$path" ;;
    esac
    if [ ! -e "$resolved" ]; then
      printf '%s:%s: link to a missing file: %s\n' "$f" "$num" "$target" >> "$hits"
    fi
  done
done < "$list"

# Paths under docs/ ending in .md named in any file, from the repository's
# root (not as part of a longer path, such as one that starts with ../,
# which the link check resolves).
if [ -s "$list" ]; then
  xargs -0 grep -I -H -n -o -E -e '(^|[^A-Za-z0-9_./-])docs/[A-Za-z0-9_./-]*[.]md\b' -- \
    < "$list" 2>/dev/null |
  while IFS= read -r line; do
    file=${line%%:*}; rest=${line#*:}; num=${rest%%:*}; text=${rest#*:}
    path=docs/${text#*docs/}
    if [ ! -e "$path" ]; then
      printf '%s:%s: names a missing file: %s\n' "$file" "$num" "$path" >> "$hits"
    fi
  done || true
fi

if [ -s "$hits" ]; then
  sort -u "$hits" | sort -s -t: -k1,1 -k2,2n
  echo "check-references: $(sort -u "$hits" | wc -l) reference(s) to what the repository does not hold" >&2
  exit 1
fi
echo "check-references: no dangling reference in $(tr -cd '\0' < "$list" | wc -c) files"

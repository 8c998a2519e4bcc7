#!/usr/bin/env bash
# The outside-package check: docs/testing.md's tutorial, played as a reader would, in a temporary folder outside
# the checkout, with the checkout in a folder NOT named AskRelay: a link `askrelay-main`, and the page's rule for
# such a folder applied to its manifest (`.package(path: "../askrelay-main")`, `package: "askrelay-main"`) and to
# its commands (`$PWD/askrelay-main/.build/debug`). Every block the page marks `<!-- tutorial: file PATH -->` is
# written to PATH (relative to that folder), every block marked `<!-- tutorial: run -->` is run, in the page's
# order, in one shell that stops at the first failing command. The page copies the larger example,
# Tests/PackageCheck/FamilyRulesTests.swift (its "A larger example"), beside the tutorial's test file, so the
# tutorial's `swift test` builds and runs both; both suites must have passed. Then the manifest exactly as the page writes it
# resolves against the checkout linked as `AskRelay`, and is refused against `askrelay-main` with the error the
# page quotes (name_checks below). It proves the products build and work as a dependency under another folder name
# (no test-only resources, no unsafe flags, no target that only builds inside the repository) and that the
# tutorial is true.
# It writes nothing into the checkout: the tutorial's `swift build --package-path AskRelay` line is skipped (make
# test has built the executables; this check fails if any file in the checkout changes while it runs). The folder
# is removed at the end (kept with KEEP=1, or when the check fails).
# Usage: Tests/PackageCheck/package-test.sh [CHECKOUT]
set -euo pipefail
SWIFT=${SWIFT:-swift}
checkout=$(cd "${1:-$(dirname "$0")/../..}" && pwd)
page="$checkout/docs/testing.md"
for tool in askrelay askrelay-broker askrelay-limits; do
    [ -x "$checkout/.build/debug/$tool" ] || {
        echo "package-test: $checkout/.build/debug/$tool is missing; run 'swift build' in the checkout first"
        exit 2
    }
done
work=$(mktemp -d "${TMPDIR:-/tmp}/askrelay-package-test.XXXXXX")
status=1
cleanup() {
    # Whatever the tutorial left running in its folder goes with it.
    pkill -KILL -f "$work/" 2>/dev/null || true
    if [ "${KEEP:-0}" = 1 ] || [ $status != 0 ]; then echo "package-test: folder kept: $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT
marker="$work/.started"
touch "$marker"
start=$(date +%s)
ln -s "$checkout" "$work/askrelay-main"
mkdir -p "$work/tmp"

python3 - "$page" "$work" > "$work/tutorial.sh" <<'PY'
import re, sys
page, root = sys.argv[1], sys.argv[2]
text = open(page).read()
out = ["set -euo pipefail"]
pattern = re.compile(r"<!-- tutorial: (run|file (\S+)) -->\n```[a-z]*\n(.*?)```", re.S)
count = 0


def renamed(body, old, new):
    """The page's rule for a checkout in a folder not named AskRelay, applied to one block."""
    if old not in body:
        sys.exit(f"docs/testing.md's tutorial has no {old} to rename (package-test.sh follows the page's rule)")
    return body.replace(old, new)


for match in pattern.finditer(text):
    count += 1
    path, body = match.group(2), match.group(3)
    line = text.count("\n", 0, match.start()) + 1
    out.append(f"echo 'package-test: docs/testing.md:{line}'")
    if path is None:
        for command in body.splitlines():
            # The checkout is built already (and must not be written to).
            if command.strip() == "swift build --package-path AskRelay":
                out.append("# skipped: " + command)
            else:
                out.append(re.sub(r"(?<![\w-])AskRelay/", "askrelay-main/", command))
    else:
        if path.endswith("/Package.swift"):
            # As written, for the name checks after the play.
            out.append(f"cat > '{root}/Package.swift.as-written' <<'ASKRELAY_TUTORIAL_EOF'\n{body}ASKRELAY_TUTORIAL_EOF")
            body = renamed(body, '"../AskRelay"', '"../askrelay-main"')
            body = renamed(body, 'package: "AskRelay"', 'package: "askrelay-main"')
        out.append(f"mkdir -p \"$(dirname '{root}/{path}')\"")
        out.append(f"cat > '{root}/{path}' <<'ASKRELAY_TUTORIAL_EOF'\n{body}ASKRELAY_TUTORIAL_EOF")
if count == 0:
    sys.exit("docs/testing.md has no <!-- tutorial: ... --> blocks")
print("\n".join(out))
PY

echo "package-test: docs/testing.md's tutorial in $work, depending on $checkout as askrelay-main"
# SwiftPM's lock files and the tests' temporary folders go into the scratch folder too.
if (cd "$work" && TMPDIR="$work/tmp" SWIFT="$SWIFT" bash "$work/tutorial.sh") > "$work/tutorial.log" 2>&1; then
    status=0
fi
grep -E "^package-test:|error:|Test run|✘|^↳ expected|^AskRelayTesting:|passed|failed|^[0-9]+$" "$work/tutorial.log" || true
# Both suites ran, and passed: the tutorial's and the larger example's (a test file left out would pass silently).
for suite in AskFlowTests FamilyRulesTests; do
    if [ $status = 0 ] && ! grep -q "✔ Suite $suite passed" "$work/tutorial.log"; then
        echo "package-test: the suite $suite did not run and pass"
        status=1
    fi
done
# The dependent package's build prints no warning that comes from AskRelay: none about the checkout's files, and
# none of SwiftPM's about a system library's flags (libzmq's pkg-config file once added `-isystem` to every build).
warnings=$(grep -E "warning:" "$work/tutorial.log" | grep -E "$checkout/|$work/askrelay-main/|prohibited flag" || true)
if [ -n "$warnings" ]; then
    echo "package-test: the dependent package's build printed warnings from AskRelay:"
    echo "$warnings" | head -20
    status=1
fi

# The package identity of a path dependency is its folder's name (not the manifest's `name`), and
# `.product(name:package:)` takes that identity; the page says so. The play above used the renamed manifest against
# `askrelay-main`. The manifest exactly as the page writes it must resolve against the checkout linked as `AskRelay`
# (the page's own layout), and against `askrelay-main` it must be refused with SwiftPM's "unknown package
# 'AskRelay'", the error the page quotes. Resolving the package graph is where the name matters.
name_checks() {
    local manifest="$work/Package.swift.as-written"
    [ -f "$manifest" ] || { echo "package-test: no tutorial manifest at $manifest"; return 1; }
    ln -s "$checkout" "$work/AskRelay"
    for variant in named-AskRelay as-written; do
        mkdir -p "$work/$variant/Tests/AskFlowTests"
        cp "$work/ChildSafetyTests/Tests/AskFlowTests/"*.swift "$work/$variant/Tests/AskFlowTests/"
        cp "$manifest" "$work/$variant/Package.swift"
    done
    sed -i 's|"\.\./AskRelay"|"../askrelay-main"|' "$work/as-written/Package.swift"
    if ! (cd "$work/named-AskRelay" && TMPDIR="$work/tmp" "$SWIFT" package show-dependencies) > "$work/named.log" 2>&1; then
        echo "package-test: the tutorial's manifest as written did not resolve with the checkout in AskRelay:"
        cat "$work/named.log"
        return 1
    fi
    grep -qi "askrelay<$work/AskRelay" "$work/named.log" || {
        echo "package-test: AskRelay is not the as-written package's dependency:"; cat "$work/named.log"; return 1; }
    (cd "$work/as-written" && TMPDIR="$work/tmp" "$SWIFT" package show-dependencies) > "$work/as-written.log" 2>&1 || true
    grep -q "unknown package 'AskRelay' in dependencies of target 'AskFlowTests'" "$work/as-written.log" || {
        echo "package-test: package: \"AskRelay\" against a folder named askrelay-main was not refused as the page says:"
        cat "$work/as-written.log"; return 1; }
    echo "package-test: the manifest as written: resolves with the checkout in AskRelay, refused against askrelay-main"
}
if [ $status = 0 ] && ! name_checks; then status=1; fi

# Nothing in the checkout may have changed (its own .build included).
changed=$(find "$checkout" -path "$checkout/.git" -prune -o -newer "$marker" -print -quit 2>/dev/null || true)
if [ -n "$changed" ]; then
    echo "package-test: the check wrote into the checkout: $changed"
    status=1
fi
echo "package-test: $([ $status = 0 ] && echo passed || echo FAILED) in $(( $(date +%s) - start )) s"
[ $status = 0 ] || echo "package-test: log $work/tutorial.log"
exit $status

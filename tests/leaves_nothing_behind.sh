#!/bin/sh
# Runs a test binary (with its arguments) in a temporary folder of its own (TEST_TMPDIR, which
# GoogleTest's TempDir() returns) and fails if the tests left anything in it.
set -u
dir=$(mktemp -d "${TMPDIR:-/tmp}/memfine-leaves-XXXXXX") || exit 1
TEST_TMPDIR=$dir "$@" >"$dir.log" 2>&1
code=$?
left=$(ls -A "$dir")
[ $code -eq 0 ] || cat "$dir.log"
rm -rf "$dir" "$dir.log"
[ $code -eq 0 ] || { echo "leaves_nothing_behind: the tests failed ($code)"; exit 1; }
[ -z "$left" ] || { echo "leaves_nothing_behind: left behind: $left"; exit 1; }

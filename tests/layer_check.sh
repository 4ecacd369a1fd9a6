#!/bin/sh
# The build's layer check refuses an include that reaches a layer the including layer does not use,
# naming the file and line, and passes the same folder once the include is gone.
set -u
check=$(dirname "$0")/../cmake/check_layer.cmake
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/core/meter/sub"
printf '#include <vector>\n#include "core/util/format.h"\n#include "core/meter/timer.h"\n' > "$tmp/core/meter/ok.cpp"
printf '// the meter reads records\n#include "core/record/record.h"\n' > "$tmp/core/meter/sub/bad.h"
if out=$(cmake -DLAYER=meter -DFOLDER=core/meter -DUSES=util -DSOURCE_DIR="$tmp" -P "$check" 2>&1); then
  echo "FAIL: an include of a layer meter does not use passed"; exit 1
fi
echo "$out" | grep -q 'core/meter/sub/bad.h:2: includes "core/record/record.h": layer meter does not use record' ||
  { echo "FAIL: the refusal does not name the file, line and layer:"; echo "$out"; exit 1; }
rm "$tmp/core/meter/sub/bad.h"
cmake -DLAYER=meter -DFOLDER=core/meter -DUSES=util -DSOURCE_DIR="$tmp" -P "$check" ||
  { echo "FAIL: a folder that includes only what it uses was refused"; exit 1; }
echo "ok"

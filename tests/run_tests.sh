#!/usr/bin/env bash
# tests/run_tests.sh: runs every CPU test binary and shell test given on the command
# line, prints their output, and ends with the total "N passed, M failed" line.
# Exits non-zero if any check failed or any test binary crashed.
set -u
total_pass=0; total_fail=0
for t in "$@"; do
  echo "=== $t"
  out=$("$t" 2>&1); rc=$?
  printf '%s\n' "$out"
  line=$(printf '%s\n' "$out" | grep -E '^[0-9]+ passed, [0-9]+ failed' | tail -n 1)
  if [ -z "$line" ]; then
    echo "NOT OK $t ended without a summary line (exit code $rc)"
    total_fail=$((total_fail + 1)); continue
  fi
  p=${line%% passed*}; f=${line#*passed, }; f=${f%% failed*}
  total_pass=$((total_pass + p)); total_fail=$((total_fail + f))
  if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
    echo "NOT OK $t exited with $rc although it reported no failure"
    total_fail=$((total_fail + 1))
  fi
done
echo "$total_pass passed, $total_fail failed"
[ "$total_fail" -eq 0 ]

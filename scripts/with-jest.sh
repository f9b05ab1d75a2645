#!/usr/bin/env bash
# Usage: with-jest.sh JLPM COMMAND...: run jest (`JLPM test`) beside COMMAND (pytest, whose workers
# wait on servers more than they compute), print jest's report after COMMAND's, and fail if either
# failed. Without node_modules/.bin/jest, COMMAND alone (with a note).
set -u
jlpm=$1; shift
log=$(mktemp); rc_file=$(mktemp)
if [ -x node_modules/.bin/jest ]; then
  ( "$jlpm" test > "$log" 2>&1; echo $? > "$rc_file" ) &
else
  echo "jest not installed: skipping the JS tests"; echo 0 > "$rc_file"
fi
echo "+ $*"
"$@"; py=$?
wait
echo "---- jest ($jlpm test) ----"
cat "$log"
js=$(cat "$rc_file")
rm -f "$log" "$rc_file"
echo "$1 ... exit $py, jest exit $js"
[ "$py" -eq 0 ] && [ "$js" -eq 0 ]

# What the launcher tests share; each script sources it after reading its arguments
# (case_name: the case to run, a function test_<case_name>).
#   work            a directory of the test's own, removed at exit
#   out, err        files in it for the output of the command under test
#   at_exit CMD     runs CMD at exit, before work is removed
#   fail, skip      end the case: status 1, or 77 (which ctest counts as skipped)
#   show_output     what fail shows after its reason; a script may define its own
#   run_case        runs test_<case_name> and says PASS

# Where ranks meet and as which rank: a job of a test is told these by its launcher,
# never by the environment the test was started in.
unset MASTER_ADDR MASTER_PORT RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE COLLECTIVES_STORE_DIR COLLECTIVES_JOB_TOKEN

work=$(mktemp -d)
out=$work/out
err=$work/err

exit_steps=()
at_exit() { exit_steps+=("$1"); }
trap 'for step in "${exit_steps[@]}"; do eval "$step"; done; rm -rf "$work"' EXIT

show_output() {
  echo "--- stdout:"; head -c 4000 "$out"
  echo "--- stderr:"; head -c 4000 "$err"
}

fail() {
  echo "FAIL ($case_name): $*"
  show_output
  exit 1
}

skip() {
  echo "SKIP ($case_name): $*"
  exit 77
}

run_case() {
  [[ $(type -t "test_$case_name") == function ]] || { echo "no test case '$case_name'"; exit 2; }
  "test_$case_name"
  echo "PASS ($case_name)"
}

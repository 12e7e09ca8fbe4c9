# Sourced by the CPU queues (scripts/ablations.sh, scripts/single_head.sh); defines:
#   start_queue NAME       cd to the repository; one copy at a time (lock runs/repro/NAME.lock: a second copy
#                          exits at once); the session's autogroup weight at 19 (with the kernel's autogroup
#                          scheduler a nice value only counts inside its own session: started with setsid/nohup
#                          the queue would get an equal share of the CPU); everything after it appended to
#                          runs/repro/NAME.log, from a start line naming the commit
#   queue_step LABEL ARGS  "$PYTHON" ARGS (default python) at nice 19, then a line "LABEL ended (<exit code>)"
start_queue() {
  cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
  mkdir -p runs/repro
  exec 9>"runs/repro/$1.lock"
  if ! flock -n 9; then
    echo "scripts/$1.sh is already running (runs/repro/$1.lock); not starting a second queue" >&2
    exit 1
  fi
  [ -w /proc/self/autogroup ] && echo 19 > /proc/self/autogroup 2>/dev/null
  exec >> "runs/repro/$1.log" 2>&1
  date -u +"%F %T start (commit $(git rev-parse --short HEAD 2>/dev/null))"
}

queue_step() {
  local label=$1
  shift
  nice -n 19 "${PYTHON:-python}" "$@"
  date -u +"%F %T $label ended ($?)"
}

# Sourced by the CPU queues (scripts/ablations.sh, scripts/single_head.sh); defines:
#   start_queue NAME       cd to the repository; one copy at a time (lock runs/repro/NAME.lock: a second copy
#                          exits at once); the session's autogroup weight at 19 (with the kernel's autogroup
#                          scheduler a nice value only counts inside its own session: started with setsid/nohup
#                          the queue would get an equal share of the CPU); everything after it appended to
#                          runs/repro/NAME.log, from a start line naming the commit
#   queue_step LABEL ARGS  "$PYTHON" ARGS (default python) at nice 19, then a line "LABEL ended (<exit code>)"
# Environment: QUEUE_WORKER=W makes this copy worker W of the queue (lock and log runs/repro/NAME-W.*), beside the
# others: `python -m studies train` claims each point before training it, so workers never train one point twice;
# QUEUE_CPUS=LIST pins this copy's steps to those CPUs (taskset -c LIST), e.g. one core per worker.
start_queue() {
  cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
  local name=$1${QUEUE_WORKER:+-$QUEUE_WORKER} worker=${QUEUE_WORKER:+ worker $QUEUE_WORKER}
  if [[ ! ${QUEUE_WORKER:-x} =~ ^[A-Za-z0-9_]+$ ]]; then
    echo "QUEUE_WORKER=$QUEUE_WORKER: expected letters, digits or _ (it names the queue's lock and log)" >&2
    exit 1
  fi
  if [ -n "${QUEUE_CPUS:-}" ] && ! taskset -c "$QUEUE_CPUS" true 2>/dev/null; then
    echo "QUEUE_CPUS=$QUEUE_CPUS: taskset cannot pin to those CPUs (this machine has $(getconf _NPROCESSORS_ONLN))" >&2
    exit 1
  fi
  mkdir -p runs/repro
  exec 9>"runs/repro/$name.lock"
  if ! flock -n 9; then
    echo "scripts/$1.sh$worker is already running (runs/repro/$name.lock); not starting a second copy" >&2
    exit 1
  fi
  [ -w /proc/self/autogroup ] && echo 19 > /proc/self/autogroup 2>/dev/null
  exec >> "runs/repro/$name.log" 2>&1
  local commit
  commit=$(git rev-parse --short HEAD 2>/dev/null)
  date -u +"%F %T start (commit $commit${worker:+,$worker}${QUEUE_CPUS:+, CPUs $QUEUE_CPUS})"
}

queue_step() {
  local label=$1
  shift
  ${QUEUE_CPUS:+taskset -c "$QUEUE_CPUS"} nice -n 19 "${PYTHON:-python}" "$@"
  date -u +"%F %T $label ended ($?)"
}

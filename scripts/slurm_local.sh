#!/usr/bin/env bash
# A one-node Slurm cluster on this machine, so that srun and sbatch launch uccl programs for real
# (tests/test_launchers.py, README "Launchers"). Needs root and Debian's slurmctld, slurmd,
# slurm-client and munge packages (scripts/setup.sh installs them).
#
#   eval "$(scripts/slurm_local.sh start)"   # prints `export SLURM_CONF=...`; waits until the node is idle
#   srun -n 4 python examples/launchers/hello.py
#   scripts/slurm_local.sh stop
#
# Everything lives under $UCCL_SLURM_DIR (default /tmp/uccl-slurm): its own slurm.conf (commands
# find it through SLURM_CONF; /etc/slurm is not touched), state, spool, logs and pid files. The
# node offers 8 CPUs whatever the machine has (SlurmdParameters=config_overrides), so a job of 4
# or 8 tasks runs on 2 cores, as the other launchers' tests do. munged is started if it is not
# running (with the key the munge package created) and left running by `stop`.
set -euo pipefail
DIR=${UCCL_SLURM_DIR:-/tmp/uccl-slurm}
CONF=$DIR/slurm.conf
NODE=$(hostname -s)

start_munge() {
  if munge -n </dev/null >/dev/null 2>&1; then return; fi
  install -d -o munge -g munge -m 0755 /run/munge
  install -d -o munge -g munge -m 0700 /var/lib/munge /var/log/munge
  runuser -u munge -- /usr/sbin/munged
  for _ in $(seq 50); do munge -n </dev/null >/dev/null 2>&1 && return; sleep 0.1; done
  echo "slurm_local: munged did not start" >&2
  exit 1
}

write_conf() {
  mkdir -p "$DIR/state" "$DIR/spool" "$DIR/log"
  cat >"$CONF" <<EOF
ClusterName=uccl-local
SlurmctldHost=$NODE(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
SlurmctldPort=${UCCL_SLURMCTLD_PORT:-6817}
SlurmdPort=${UCCL_SLURMD_PORT:-6818}
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
SlurmdParameters=config_overrides
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
InactiveLimit=0
KillWait=5
MinJobAge=30
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=8 State=UNKNOWN
PartitionName=local Nodes=$NODE Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
EOF
}

stop() {
  for d in slurmd slurmctld; do
    if [ -f "$DIR/$d.pid" ]; then
      pid=$(cat "$DIR/$d.pid")
      kill "$pid" 2>/dev/null || true
      for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -9 "$pid" 2>/dev/null || true
      rm -f "$DIR/$d.pid"
    fi
  done
}

case "${1:-}" in
  start)
    for c in slurmctld slurmd srun sbatch munged; do
      command -v "$c" >/dev/null 2>&1 || { echo "slurm_local: $c not found (apt-get install slurmctld slurmd slurm-client munge)" >&2; exit 2; }
    done
    stop
    start_munge
    write_conf
    export SLURM_CONF=$CONF
    slurmctld -i >/dev/null 2>&1   # -i: ignore state left by an earlier run
    slurmd >/dev/null 2>&1
    for _ in $(seq 200); do
      state=$(sinfo -h -n "$NODE" -o %t 2>/dev/null || true)
      case "$state" in idle*|mix*|alloc*) echo "export SLURM_CONF=$CONF"; exit 0 ;; esac
      sleep 0.1
    done
    echo "slurm_local: node $NODE did not become idle (state '${state:-?}'); logs in $DIR/log" >&2
    tail -n 5 "$DIR/log/slurmctld.log" "$DIR/log/slurmd.log" >&2 || true
    stop
    exit 1
    ;;
  stop) stop ;;
  *) echo "usage: $0 start|stop" >&2; exit 2 ;;
esac

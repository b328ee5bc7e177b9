#!/usr/bin/env bash
# Single-node Slurm on localhost for snakepack's integration tests and CI.
#
#   sudo tests/slurm/local-cluster.sh start    # install (if needed), configure, start, wait for `idle`
#   tests/slurm/local-cluster.sh status        # print sinfo; exit 0 iff node `localhost` is idle (any user)
#   sudo tests/slurm/local-cluster.sh stop     # scancel, stop slurmd -> slurmctld -> munged
#
# Debian 12 packages (slurm-wlm 22.05, munge 0.5). No systemd, no cgroups
# (proctrack/linuxproc, task/none), no accounting (no slurmdbd): `sacct` fails
# on this cluster, so Snakemake must use `slurm-status-command: squeue`
# (profiles/slurm-local/profile.yaml). MinJobAge=300 keeps finished jobs
# visible to squeue long enough for that mode.
#
# All daemons run as root and write their PID files to /run/slurm-local/;
# `stop` only kills processes named in those files. The cluster has its own
# name and ports (CLUSTER, CTLD_PORT, SLURMD_PORT below, not Slurm's defaults);
# `start` records them with its configuration in /run/slurm-local/cluster
# (STATE), which `stop` removes: the tests use the cluster named there and no
# other (tests/slurm_client.py).
#
# Environment:
#   SLURM_LOCAL_TIMEOUT  seconds to wait for the node to become idle (default 60)
#   SLURM_LOCAL_NO_APT=1 never run apt-get (fail if packages are missing)
set -euo pipefail

PIDDIR=/run/slurm-local
CONF=/etc/slurm/slurm.conf
LOGDIR=/var/log/slurm
TIMEOUT="${SLURM_LOCAL_TIMEOUT:-60}"
PACKAGES=(slurmctld slurmd slurm-client munge)
STATE="$PIDDIR/cluster"
CLUSTER=snakepack-test
CTLD_PORT=6917
SLURMD_PORT=6918

log() { printf '[slurm-local] %s\n' "$*" >&2; }
die() { printf '[slurm-local] ERROR: %s\n' "$*" >&2; exit 1; }

usage() {
    echo "usage: $0 start|stop|status" >&2
    exit 2
}

require_root() {
    [ "$(id -u)" -eq 0 ] || die "must run as root (it installs packages, writes /etc/slurm and starts daemons)"
}

# pid_alive NAME -> 0 if /run/slurm-local/NAME.pid names a live process whose
# command name is NAME (guards against a recycled PID after a reboot/crash)
pid_alive() {
    local f="$PIDDIR/$1.pid" pid
    [ -s "$f" ] || return 1
    pid="$(tr -dc '0-9' <"$f")"
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null &&
        [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$1" ]
}

node_state() {
    # empty output if slurmctld does not answer
    timeout 10 sinfo -h -N -n localhost -o %t 2>/dev/null | head -n1 || true
}

install_packages() {
    local missing=() p
    for p in "${PACKAGES[@]}"; do
        if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
            missing+=("$p")
        fi
    done
    [ "${#missing[@]}" -eq 0 ] && return 0
    [ "${SLURM_LOCAL_NO_APT:-0}" = 1 ] && die "missing packages: ${missing[*]} (SLURM_LOCAL_NO_APT=1)"
    command -v apt-get >/dev/null || die "missing packages ${missing[*]} and no apt-get (Debian/Ubuntu only)"
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        # keep the postinst scripts from starting services through init
        log "creating /usr/sbin/policy-rc.d (exit 101) so postinst does not start services"
        printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
        chmod 0755 /usr/sbin/policy-rc.d
    fi
    log "installing ${missing[*]} ..."
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${PACKAGES[@]}" >/dev/null
    log "packages installed"
}

write_conf() {
    local cpus mem_kb mem_mb tmp
    cpus="$(nproc)"
    mem_kb="$(awk '/^MemAvailable:/ {print $2}' /proc/meminfo)"
    [ -n "$mem_kb" ] || die "cannot read MemAvailable from /proc/meminfo"
    mem_mb=$(( mem_kb * 80 / 100 / 1024 ))
    install -d -m 0755 /etc/slurm
    tmp="$(mktemp /etc/slurm/.slurm.conf.XXXXXX)"
    cat >"$tmp" <<EOF
# Written by snakepack tests/slurm/local-cluster.sh -- single-node test cluster.
ClusterName=$CLUSTER
SlurmctldHost=localhost
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
MpiDefault=none
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/filetxt
JobCompLoc=$LOGDIR/jobcomp.log
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
MinJobAge=300
SlurmctldPidFile=$PIDDIR/slurmctld.pid
SlurmdPidFile=$PIDDIR/slurmd.pid
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldLogFile=$LOGDIR/slurmctld.log
SlurmdLogFile=$LOGDIR/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
NodeName=localhost NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP
EOF
    chmod 0644 "$tmp"
    mv -f "$tmp" "$CONF"
    log "wrote $CONF (CPUs=$cpus RealMemory=${mem_mb}MB, partition debug)"
}

start_munge() {
    if pid_alive munged; then
        log "munged already running (pid $(cat "$PIDDIR/munged.pid"))"
    else
        [ -r /etc/munge/munge.key ] || die "/etc/munge/munge.key missing (reinstall the munge package)"
        install -d -o munge -g munge -m 0755 /run/munge
        runuser -u munge -- /usr/sbin/munged --pid-file=/run/munge/munged.pid
        cp /run/munge/munged.pid "$PIDDIR/munged.pid"
        log "started munged (pid $(cat "$PIDDIR/munged.pid"))"
    fi
    munge -n | unmunge >/dev/null || die "munge self-test failed"
}

wait_idle() {
    local deadline=$(( SECONDS + TIMEOUT )) state=""
    while [ "$SECONDS" -lt "$deadline" ]; do
        state="$(node_state)"
        [ "$state" = idle ] && return 0
        sleep 0.5
    done
    log "node state after ${TIMEOUT}s: '${state:-<no answer from slurmctld>}'"
    log "see $LOGDIR/slurmctld.log and $LOGDIR/slurmd.log"
    return 1
}

# write_state: record the running cluster (name and port as its configuration gives them) for the tests
write_state() {
    local name port tmp
    name="$(sed -n 's/^ClusterName=//p' "$CONF" | head -n1)"
    port="$(sed -n 's/^SlurmctldPort=//p' "$CONF" | head -n1)"
    tmp="$(mktemp "$PIDDIR/.cluster.XXXXXX")"
    printf '%s\n' "# tests/slurm/local-cluster.sh start: the test cluster (removed by stop)" \
        "conf=$CONF" "cluster=$name" "port=${port:-6817}" "pidfile=$PIDDIR/slurmctld.pid" >"$tmp"
    chmod 0644 "$tmp"
    mv -f "$tmp" "$STATE"
}

cmd_start() {
    require_root
    local t0=$SECONDS
    install_packages
    mkdir -p "$PIDDIR"
    if pid_alive slurmctld && pid_alive slurmd; then
        local state
        state="$(node_state)"
        case "$state" in
            idle|mix|mixed|alloc|allocated|comp|completing)
                # healthy; maybe busy with someone else's jobs -- leave it alone
                log "already running, node localhost '$state' -- nothing to do"
                write_state
                return 0 ;;
        esac
        log "daemons running but node is '${state:-<no answer>}' -- restarting them"
    fi
    if pid_alive slurmctld || pid_alive slurmd; then
        # half-up or wedged: restart cleanly instead of layering daemons
        stop_daemons
    fi
    start_munge
    install -d -m 0755 /var/spool/slurmctld /var/spool/slurmd "$LOGDIR"
    write_conf
    rm -f /var/spool/slurmctld/clustername  # the saved state's name: -c discards that state anyway
    /usr/sbin/slurmctld -c        # forks; -c discards old saved state
    /usr/sbin/slurmd -N localhost # forks
    log "started slurmctld and slurmd; waiting up to ${TIMEOUT}s for node localhost to be idle"
    if ! wait_idle; then
        die "node localhost did not become idle within ${TIMEOUT}s"
    fi
    write_state
    log "node localhost idle after $(( SECONDS - t0 ))s (slurmctld pid $(cat "$PIDDIR/slurmctld.pid"), slurmd pid $(cat "$PIDDIR/slurmd.pid" 2>/dev/null || echo '?'))"
    sinfo
}

# stop_one NAME: SIGTERM the pid in NAME.pid, wait up to 20 s, then SIGKILL
stop_one() {
    local name="$1" f="$PIDDIR/$1.pid" pid i
    if ! pid_alive "$name"; then
        rm -f "$f"
        return 0
    fi
    pid="$(tr -dc '0-9' <"$f")"
    kill -TERM "$pid" 2>/dev/null || true
    for i in $(seq 1 80); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.25
    done
    if kill -0 "$pid" 2>/dev/null; then
        log "$name (pid $pid) ignored SIGTERM for 20 s -- sending SIGKILL"
        kill -KILL "$pid" 2>/dev/null || true
        sleep 0.5
    fi
    rm -f "$f"
    log "stopped $name (pid $pid)"
}

stop_daemons() {
    stop_one slurmd
    stop_one slurmctld
}

cmd_stop() {
    require_root
    rm -f "$STATE"
    if pid_alive slurmctld; then
        timeout 10 scancel --user=root 2>/dev/null || true
    fi
    stop_daemons
    stop_one munged
    log "stopped"
}

cmd_status() {
    local state
    # one sinfo first: with slurmctld down every Slurm client call takes ~9 s to give up
    if ! timeout 15 sinfo 2>/dev/null; then
        log "no answer from slurmctld (not started? run: $0 start)"
        return 1
    fi
    state="$(node_state)"
    if [ "$state" = idle ]; then
        return 0
    fi
    log "node localhost is '${state:-<no answer>}', not idle"
    return 1
}

[ $# -eq 1 ] || usage
case "$1" in
    start) cmd_start ;;
    stop) cmd_stop ;;
    status) cmd_status ;;
    *) usage ;;
esac

#!/bin/bash
# Sets up a single-node Slurm on a Debian machine (as root, without systemd), runs a shipped
# study as a job array of shards, cancels one task mid-run, resubmits it, lets the merge run,
# and checks the merged folder equals an unsharded run of the same study byte for byte.
#
#   examples/slurm/check-single-node.sh [STUDY] [N]     (default studies/tech-scaling.yaml, 4)
#
# From the repository root; it builds stackflow (release) first. It installs Debian's
# slurmctld, slurmd, slurm-client and munge, writes /etc/slurm/slurm.conf, and starts munged,
# slurmctld and slurmd (nothing starts them on a machine without systemd). Reruns reuse a
# Slurm that is already up. Work happens in target/slurm-check/.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
study=$(realpath "${1:-$repo/studies/tech-scaling.yaml}")
cd "$repo"
n=${2:-4}
work=$PWD/target/slurm-check
here=$PWD/examples/slurm
now() { date +%s%N; }
since() { local ms=$((($(now) - $1) / 1000000)); printf '%d.%01d' $((ms / 1000)) $((ms % 1000 / 100)); }

start=$(now)
if ! scontrol ping 2>/dev/null | grep -q UP; then
    if ! command -v slurmctld >/dev/null; then
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
            slurmctld slurmd slurm-client munge >/dev/null
    fi
    [ -f /etc/munge/munge.key ] || mungekey --create
    chown munge:munge /etc/munge/munge.key
    chmod 400 /etc/munge/munge.key
    mkdir -p /run/munge /var/spool/slurmctld /var/spool/slurmd /var/log/slurm
    chown munge:munge /run/munge
    pgrep -x munged >/dev/null || runuser -u munge -- munged
    host=$(hostname -s)
    cat > /etc/slurm/slurm.conf <<CONF
ClusterName=stackflow-check
SlurmctldHost=$host
SlurmUser=root
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MailProg=/bin/true
ReturnToService=2
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
$(slurmd -C | head -n 1)
PartitionName=check Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
    pgrep -x slurmctld >/dev/null || slurmctld
    pgrep -x slurmd >/dev/null || slurmd
    for _ in $(seq 1 60); do
        sinfo -h -o %t 2>/dev/null | grep -qE '^(idle|mix|alloc)' && break
        sleep 0.5
    done
fi
sinfo -h -o '%P %D %c %t' | sed 's/^/slurm partition: /'
echo "set-up: $(since "$start") s"

cargo build --release --quiet
export STACKFLOW=$PWD/target/release/stackflow
rm -rf "$work" && mkdir -p "$work"
cd "$work"

wait_for() { # job ids...: until none is pending or running
    while squeue -h -j "$(IFS=,; echo "$*")" 2>/dev/null | grep -q .; do sleep 0.2; done
}

start=$(now)
read -r _ array _ merge < <("$here/submit.sh" "$study" "$work/shards" "$n")
echo "submitted array $array ($n tasks) and merge $merge"
# Cancel task 2 once it has finished at least one point, before it finishes all.
victim=2
for _ in $(seq 1 600); do
    if [ -s "shards-$victim/points.jsonl" ]; then break; fi
    sleep 0.05
done
scancel "${array}_$victim"
if [ -e "shards-$victim/results.json" ]; then
    echo "task $victim finished before it was cancelled: use a larger study or more shards" >&2
    exit 1
fi
done_points=$(wc -l < "shards-$victim/points.jsonl")
echo "cancelled task $victim with $done_points points of its shard done"
wait_for "$array"
# The merge's dependency can no longer be met: Slurm cancels it (--kill-on-invalid-dep).
for _ in $(seq 1 100); do squeue -h -j "$merge" 2>/dev/null | grep -q . || break; sleep 0.2; done
[ ! -e shards/results.json ] || { echo "FAIL: a merge ran with a shard cancelled" >&2; exit 1; }
read -r _ tasks _ array2 _ merge2 < <("$here/resubmit.sh" "$study" "$work/shards" "$n")
echo "resubmitted tasks $tasks as $array2, merge $merge2"
wait_for "$array2" "$merge2"
echo "array, cancel, resubmission and merge: $(since "$start") s"
grep -h "already done" stackflow-sweep-"${array2}"_*.out | sed 's/^/resumed: /' || true

start=$(now)
"$STACKFLOW" sweep "$study" --out whole --jobs "$(nproc)" >/dev/null
echo "unsharded run: $(since "$start") s"
status=0
for f in whole/*; do
    name=$(basename "$f")
    if cmp -s "$f" "shards/$name"; then
        echo "identical: $name"
    else
        echo "DIFFERENT: $name" >&2
        status=1
    fi
done
[ "$(ls whole | wc -l)" = "$(ls shards | wc -l)" ] || { echo "DIFFERENT file lists" >&2; status=1; }
if [ $status = 0 ]; then echo "PASS: the merged folder equals the unsharded run byte for byte"; fi
exit $status

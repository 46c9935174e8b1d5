#!/bin/bash
# Resubmits the unfinished shards of a sweep (those whose folder PREFIX-K has no
# results.json: never started, cancelled or failed mid-run) with --resume, and a new merge
# after them.
#
#   examples/slurm/resubmit.sh STUDY PREFIX N [sbatch options, as for submit.sh]
#
# Prints the tasks resubmitted and the job ids, or that every shard is finished.
set -euo pipefail
if [ $# -lt 3 ]; then
    echo "usage: $0 STUDY PREFIX N [sbatch options]" >&2
    exit 2
fi
here=$(cd "$(dirname "$0")" && pwd)
study=$1 prefix=$2 n=$3
shift 3
# A task still queued or running would write its folder beside its resubmission.
if squeue -h -u "$(id -un)" -n stackflow-sweep,stackflow-merge 2>/dev/null | grep -q .; then
    echo "stackflow-sweep or stackflow-merge jobs are still queued or running (squeue); \
resubmit once they have ended or been cancelled" >&2
    exit 1
fi
tasks=()
for k in $(seq 1 "$n"); do
    [ -f "$prefix-$k/results.json" ] || tasks+=("$k")
done
if [ ${#tasks[@]} -eq 0 ]; then
    echo "every shard of $prefix is finished; merge: sbatch $here/merge.sbatch $prefix $n"
    exit 0
fi
list=$(IFS=,; echo "${tasks[*]}")
array=$(sbatch --parsable --array="$list" "$@" "$here/sweep-array.sbatch" "$study" "$prefix" "$n")
merge=$(sbatch --parsable --dependency="afterok:$array" --kill-on-invalid-dep=yes "$@" \
    "$here/merge.sbatch" "$prefix" "$n")
echo "tasks $list array $array merge $merge"

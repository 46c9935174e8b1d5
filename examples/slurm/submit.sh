#!/bin/bash
# Submits a study as a job array of N shards and a merge that runs when every shard is done.
#
#   examples/slurm/submit.sh STUDY PREFIX N [sbatch options, e.g. --partition=p --cpus-per-task=4]
#
# The sbatch options go to the array's tasks and to the merge alike.
# Prints the array's and the merge's job ids. A cancelled or failed task leaves the merge's
# dependency unsatisfiable: `--kill-on-invalid-dep=yes` cancels the merge then, and
# resubmit.sh reruns the unfinished shards and a new merge.
set -euo pipefail
if [ $# -lt 3 ]; then
    echo "usage: $0 STUDY PREFIX N [sbatch options]" >&2
    exit 2
fi
here=$(cd "$(dirname "$0")" && pwd)
study=$1 prefix=$2 n=$3
shift 3
array=$(sbatch --parsable --array="1-$n" "$@" "$here/sweep-array.sbatch" "$study" "$prefix" "$n")
merge=$(sbatch --parsable --dependency="afterok:$array" --kill-on-invalid-dep=yes "$@" \
    "$here/merge.sbatch" "$prefix" "$n")
echo "array $array merge $merge"

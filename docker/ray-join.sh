#!/bin/sh
# Entry point of the `api` and `runner` services (the control plane): join the Ray cluster
# as a node that offers no CPU and no GPU, then run the given command (`autotune serve ...
# --ray-address HEAD:PORT`).
#
# A Ray driver attaches to a raylet of its own machine, so the container needs one; with no
# resources on it, Ray never places a trial there: trials run on the GPU workers, and the
# hardware a space is searched for is theirs (each worker node probes itself). The control
# plane's own machine needs no GPU and is never probed for a space.
# The head address is the command's --ray-address (or AUTOTUNE_RAY_ADDRESS); the token
# comes from RAY_AUTH_TOKEN, with RAY_AUTH_MODE=token, like every node of the cluster.
set -eu

address="${AUTOTUNE_RAY_ADDRESS:-}"
previous=""
for arg in "$@"; do
    case "$previous" in --ray-address) address="$arg" ;; esac
    case "$arg" in --ray-address=*) address="${arg#--ray-address=}" ;; esac
    previous="$arg"
done
if [ -z "$address" ]; then
    echo "ray-join: no --ray-address in the command and no AUTOTUNE_RAY_ADDRESS" >&2
    exit 2
fi

ray start --address="$address" --num-cpus=0 --num-gpus=0 --disable-usage-stats
exec "$@"

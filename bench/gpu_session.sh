#!/bin/bash
# One lent GPU machine's whole session, prepared ahead (device time is minutes):
#   bash bench/gpu_session.sh OUT_DIR
# bench_gpu.py first (the figure issue 36 asks for), then tests/test_gpu.py, then the step's
# profiles; each under its own timeout (SIGINT first, so that its finally blocks stop what it
# started), each one's output in a file in OUT_DIR (not a pipe, which a leftover child would
# hold open), none stopping the next.
# Where the machine lacks the project's Python packages, wheels for its Python in .whl/ are
# installed into /tmp/site first; where it lacks redis-server, .gpu/bin/ may hold one (a
# wrapper naming its own libraries). Both folders are this checkout's ignored ones.
set -u
out=${1:?OUT_DIR}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 PATH="$PWD/.gpu/bin:$PATH"
if compgen -G ".whl/*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl || exit 1
    export PYTHONPATH="/tmp/site:$PWD"
fi
{
    date -u
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
    python3 -c 'import sys, torch; print(sys.version.split()[0], "torch", torch.__version__,
        "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version())'
    redis-server --version
    nproc
} >"$out/machine.txt" 2>&1
cat "$out/machine.txt"
# TESTS_FIRST=1: the tests before the bench (a short session that must see them green)
step() {  # step LOG SECONDS COMMAND...: COMMAND's output in OUT_DIR/LOG, then printed
    local log=$1 seconds=$2
    shift 2
    timeout -s INT -k 15 "$seconds" "$@" >"$out/$log" 2>&1
    echo "== $log (exit $?)"
    tail -c 4000 "$out/$log"
}
tests() {
    step test_gpu.log "${TESTS_S:-90}" python3 -m pytest -v -rA -p no:cacheprovider \
        --timeout 120 tests/test_gpu.py
}
[ -n "${TESTS_FIRST:-}" ] && tests
# BENCH_ARGS: bench_gpu.py's arguments (default: both models, 5 pairs; over 340 s on an
# H200: the wide MLP's 5 pairs and 4 of the CNN's took that long on 2026-11-30)
# shellcheck disable=SC2086
step bench_gpu.log "${BENCH_S:-400}" python3 bench/bench_gpu.py ${BENCH_ARGS:---pairs 5}
cp bench/results/gpu.md "$out/gpu.md" 2>/dev/null
[ -z "${TESTS_FIRST:-}" ] && tests
# PROFILES: the step profiles to take, model:precision each (profile_gpu_step.py's options).
# The defaults' timeouts (400 + 90 + 60 s) fit the device's 600 s a command with the wheels'
# install; a longer bench (--diagnose: three sides a pair) wants TESTS_FIRST=1 and less else.
for p in ${PROFILES:-resnet:bf16}; do
    step "profile-${p%%:*}-${p##*:}.log" "${PROFILE_S:-60}" python3 bench/profile_gpu_step.py \
        --model "${p%%:*}" --precision "${p##*:}"
done

#!/bin/bash
# One lent GPU machine's whole session, prepared ahead (device time is minutes):
#   bash bench/gpu_session.sh OUT_DIR
# bench_gpu.py first (the figure issue 36 asks for), then tests/test_gpu.py, then the step's
# profile; each under its own timeout, each one's output in OUT_DIR, none stopping the next.
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
tests() {
    timeout "${TESTS_S:-150}" python3 -m pytest -v -rA -p no:cacheprovider --timeout 120 \
        tests/test_gpu.py 2>&1 | tee "$out/test_gpu.log"
}
[ -n "${TESTS_FIRST:-}" ] && tests
# BENCH_ARGS: bench_gpu.py's arguments (default: both models, 5 pairs; about 340 s on an H200)
# shellcheck disable=SC2086
timeout "${BENCH_S:-360}" python3 bench/bench_gpu.py ${BENCH_ARGS:---pairs 5} 2>&1 |
    tee "$out/bench_gpu.log"
cp bench/results/gpu.md "$out/gpu.md" 2>/dev/null
[ -z "${TESTS_FIRST:-}" ] && tests
timeout "${PROFILE_S:-80}" python3 bench/profile_gpu_step.py 2>&1 | tee "$out/profile.log"

#!/usr/bin/env bash
# The checks a lent GPU machine runs (16 cores, one GPU, its own python3 with torch), each bounded
# so the whole fits one short lease: the GPU tests, then the benchmarks' device rows. Results go to
# $OUT (or /tmp/gpu-checks); whoever ran it copies the records into data/. gymnasium and ale-py
# travel as wheels in .whl/ (the machine has no registry). The copied tree may carry a stale .git:
# WORKBENCH_GIT_COMMIT=<the commit sent> names the records' commit. Arguments pick the steps
# (default: all): quick (five GPU tests, seconds), paths (each system's GPU learning test), pong
# (one SEED V-trace and one Ape-X DQN Pong recipe with the learner on the GPU, 180 s each: issue
# 25), r2d2-pong (SEED R2D2's Pong recipe likewise), updates (one learner step of SEED's two Pong
# recipes by precision), costs, seed, training, cpu; tests = quick paths.
set -u
out="${OUT:-/tmp/gpu-checks}"; mkdir -p "$out"
export PYTHONUNBUFFERED=1 OMP_WAIT_POLICY=PASSIVE WORKBENCH_PROGRESS=0
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH="/tmp/site:$PWD"
{ nvidia-smi -L; python3 -c "import torch; print('torch', torch.__version__)"; echo "commit ${WORKBENCH_GIT_COMMIT:-?}"; } 2>&1 | tee "$out/machine.txt"
step() { local seconds=$1; shift; echo "=== $* (at most ${seconds}s)"; local t=$SECONDS; timeout "$seconds" "$@"; echo "=== rc=$? in $((SECONDS - t))s"; }
steps=" ${*:-quick paths pong r2d2-pong updates costs seed training cpu} "
steps=${steps/ tests / quick paths }
{
# The quick GPU tests first, then each system's learning run in its own bounded step (on 2026-11-26
# the three in one 240-s step left Ape-X's unfinished behind SEED's two, and the quick ones unrun).
[[ $steps == *" quick "* ]] && step 90 python3 -m pytest -p no:cacheprovider -q -rA --durations=0 \
    tests/test_pg.py::test_float16_with_grad_scaler_on_cuda_stays_close_and_checkpoints_its_scale \
    tests/test_runs.py::test_moving_the_learner_to_cuda_mid_run_moves_model_and_optimizer_state \
    tests/test_envs.py::test_resolve_device_cuda_names_cpu_as_the_fix_without_a_gpu \
    "tests/test_seed.py::test_a_bfloat16_channels_last_impala_update_takes_the_float32_step_up_to_rounding[cuda]" \
    "tests/test_r2d2.py::test_a_bfloat16_channels_last_update_takes_the_float32_step_up_to_rounding[cuda]"
for system in apex seed_vtrace seed_r2d2; do
    [[ $steps == *" paths "* ]] && step 150 python3 -m pytest -p no:cacheprovider -q -rA --durations=0 tests/test_gpu_paths.py -k "$system"
done
# The two-core Pong recipes as they are, the learner alone moved: what the GPU buys each system's
# learner, and where the actors then limit it (the curve, updates and env steps per second).
for recipe in seed-vtrace-pong-fast apex-dqn-pong-fast seed-r2d2-pong-fast; do
    step_name=pong; [[ $recipe == seed-r2d2-pong-fast ]] && step_name=r2d2-pong
    [[ $steps == *" $step_name "* ]] && step 240 python3 benchmarks/learning.py --recipes "$recipe" \
        --seeds 0 --device cuda --max-seconds 180 --curve-every 5 --log-every 30 \
        --keep-checkpoint "$out/${recipe//-/_}_cuda_s{seed}.pt" \
        --out "$out/learning_${recipe//-/_}_cuda.json"
done
[[ $steps == *" updates "* ]] && step 120 python3 benchmarks/learner_updates.py --device cuda --repeats 3 --updates 5 --out "$out/learner_updates_cuda.json"
[[ $steps == *" costs "* ]] && step 60 python3 benchmarks/component_costs.py --device cuda --seconds 0.4 --out "$out/component_costs_cuda.json"
[[ $steps == *" seed "* ]] && step 240 python3 benchmarks/central_inference.py --device cuda --actors 1 4 16 --seconds 4 --transports local --layouts 4x16 8x8 16x4 --out "$out/central_inference_cuda.json"
[[ $steps == *" training "* ]] && step 100 python3 benchmarks/training_throughput.py --device cuda --seconds 8 --threads 1,4 --out "$out/training_throughput_cuda.json"
[[ $steps == *" cpu "* ]] && step 45 python3 benchmarks/component_costs.py --device cpu --threads 1 16 --seconds 0.2 --out "$out/component_costs_cpu_16cores.json"
} 2>&1 | tee -a "$out/log.txt"

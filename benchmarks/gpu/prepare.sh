#!/usr/bin/env bash
# Run here (a machine with pip and the project's .venv) before a GPU session: packs what
# the GPU machine's image lacks into three git-ignored folders that the device tool
# carries (64 MiB in all), then `bash benchmarks/gpu/session.sh` runs there.
#
#   .whl/      wheels for Python 3.12 x86-64: DeepSpeed (built here, pure Python), pydantic,
#              jsonschema, hjson, tensorboardX and their needs; torch, numpy, pyarrow,
#              tokenizers and the rest are on the image already
#   .raypkg/   Ray's wheel unpacked without ray/jars (Java only; 32 MB of the 79 MB that
#              would not fit), as one tar.xz (~33 MB)
#   .gpudata/  the few files of ../shared/data that configs/gpt-tiny.yaml reads
set -euo pipefail
cd "$(dirname "$0")/../.."
DATA_DIR=${DATA_DIR:-../shared/data}
version() { .venv/bin/python -c "import importlib.metadata as m; print(m.version('$1'))"; }
RAY_VERSION=$(version ray)
DEEPSPEED_VERSION=$(version deepspeed)
PYDANTIC_VERSION=$(version pydantic)
PYDANTIC_CORE_VERSION=$(version pydantic-core)
for folder in .whl .raypkg .gpudata; do
  grep -qx "/$folder/" .git/info/exclude 2>/dev/null || echo "/$folder/" >> .git/info/exclude
done
rm -rf .whl .raypkg .gpudata && mkdir -p .whl .raypkg .gpudata
platform=(--only-binary=:all: --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64
          --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
python3 -m pip download -q --no-deps "${platform[@]}" -d .whl \
  "pydantic==$PYDANTIC_VERSION" "pydantic-core==$PYDANTIC_CORE_VERSION" annotated-types typing-inspection \
  typing-extensions jsonschema jsonschema-specifications referencing rpds-py hjson tensorboardX
.venv/bin/pip wheel -q --no-deps --no-build-isolation "deepspeed==$DEEPSPEED_VERSION" -w .whl
unpacked=$(mktemp -d)
python3 -m pip download -q --no-deps "${platform[@]}" -d "$unpacked" "ray==$RAY_VERSION"
(cd "$unpacked" && unzip -q ray-*.whl && rm -rf ray-*.whl ray/jars && tar cf - . | xz -T0 -6 > "$OLDPWD/.raypkg/ray-$RAY_VERSION.tar.xz")
rm -rf "$unpacked"
mkdir -p .gpudata/corpus/gutenberg .gpudata/glue_data .gpudata/eval
cp "$DATA_DIR"/corpus/gutenberg/{pg7700.txt,pg1250.txt,The-Dunwich-Horror.txt,pg851.txt} .gpudata/corpus/gutenberg/
cp -r "$DATA_DIR"/glue_data/SST-2 .gpudata/glue_data/
mkdir -p .gpudata/eval/superglue
cp -r "$DATA_DIR"/eval/lambada "$DATA_DIR"/eval/copa .gpudata/eval/
cp -r "$DATA_DIR"/eval/superglue/COPA .gpudata/eval/superglue/
du -sh .whl .raypkg .gpudata

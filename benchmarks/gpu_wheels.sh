#!/usr/bin/env bash
# Download, on a machine with PyPI, the wheels that `python -m serving` needs and the GPU
# machine's image (Python 3.12, torch, no KServe) lacks; gpu_suite.sh installs them there.
#
#   bash benchmarks/gpu_wheels.sh            # -> build/gpu/wheels (about 20 MB)
#
# The list is what `import serving.__main__` loads, less the image's packages (see the
# device's KINDS.md), with protobuf and grpcio pinned to the versions KServe's generated
# code was built for.
set -euo pipefail
cd "$(dirname "$0")/.."
out=build/gpu/wheels
mkdir -p "$out"
platforms=()
for tag in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 \
           manylinux2014_x86_64 manylinux1_x86_64; do
  platforms+=(--platform "$tag")
done
"${PYTHON:-.venv/bin/python}" -m pip download --quiet --no-deps --only-binary=:all: \
  --python-version 3.12 --implementation cp "${platforms[@]}" -d "$out" \
  kserve==0.21.0 fastapi==0.165.0 starlette==1.10.0 uvicorn==0.54.0 watchfiles==1.3.0 \
  pydantic==2.14.4 pydantic_core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 \
  python-multipart==0.0.34 timing-asgi==0.3.2 orjson==3.13.0 cloudevents==1.13.0 \
  deprecation==2.1.0 grpc-interceptor==0.15.4 grpcio==1.85.3 grpcio-tools==1.81.1 \
  protobuf==6.33.6 kubernetes==30.1.0 google-auth==2.63.0 oauthlib==4.0.1 \
  requests-oauthlib==2.0.0 websocket-client==1.9.2 cryptography==50.0.2 cffi==2.1.1 \
  opentelemetry-api==1.45.2 importlib_resources==7.1.0 pytz==2026.6 \
  jsonschema==4.26.0 jsonschema-specifications==2025.9.1 referencing==0.37.0 \
  rpds-py==2026.9.1 pyasn1==0.6.4 pyasn1-modules==0.4.2 rsa==4.9.1 cachetools==5.5.2 \
  durationpy==0.10
du -sh "$out"

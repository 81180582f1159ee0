# The smallest image that trains with the cupy side (protocol §8): Python, NumPy, PyYAML, CuPy and
# only the NVIDIA libraries the cupy side opens (the CUDA runtime, cuBLAS/cuBLASLt, and NVRTC,
# which compiles the side's .cu kernels when it starts), and tr2's own files. The driver's libcuda
# comes from the host (NVIDIA's container toolkit, `docker run --gpus all`), not from the image.
#
# Build context: a folder holding lib/tr2 and params/models.yaml (tr2.footprint.build_context makes
# one; `python -m tr2.runner footprint` builds, measures and tries this image where Docker runs):
#   docker build -f docker/cupy.Dockerfile -t tr2-cupy CONTEXT
#   docker run --rm --gpus all -v DATA:/data:ro -e TR2_DATA=/data tr2-cupy \
#       --side cupy --model nanogpt --dtype bfloat16 --half-roundings --steps 400
#
# CUPY_SPEC and CUDA_WHEELS pin CuPy and NVIDIA's wheels (tr2.footprint passes the versions it
# measured). The defaults are for CUDA 13; for CUDA 12 use cupy-cuda12x with nvidia-cublas-cu12
# nvidia-cuda-nvrtc-cu12 nvidia-cuda-runtime-cu12. Without a GPU the side runs its NumPy forms, and
# CuPy is then not needed: CUPY_SPEC= CUDA_WHEELS= builds that image.
ARG PYTHON_VERSION=3.12
FROM python:${PYTHON_VERSION}-slim

ARG CUPY_SPEC=cupy-cuda13x
ARG CUDA_WHEELS="nvidia-cublas==13.* nvidia-cuda-nvrtc==13.* nvidia-cuda-runtime==13.*"

RUN pip install --no-cache-dir numpy pyyaml \
    && if [ -n "$CUPY_SPEC" ]; then pip install --no-cache-dir "$CUPY_SPEC" $CUDA_WHEELS; fi \
    && find /usr/local/lib -depth -type d -name __pycache__ -exec rm -rf '{}' +

COPY lib/tr2 /opt/tr2/lib/tr2
COPY params/models.yaml /opt/tr2/params/models.yaml
ENV PYTHONPATH=/opt/tr2/lib PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
WORKDIR /opt/tr2
ENTRYPOINT ["python", "-u", "-m", "tr2.train"]

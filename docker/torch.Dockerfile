# The smallest image that trains with the torch side (protocol §8): Python, what `pip install torch
# numpy pyyaml` brings, and tr2's own files. The driver's libcuda comes from the host
# (NVIDIA's container toolkit, `docker run --gpus all`), not from the image.
#
# Build context: a folder holding lib/tr2 and params/models.yaml (tr2.footprint.build_context makes
# one; `python -m tr2.runner footprint` builds, measures and tries this image where Docker runs):
#   docker build -f docker/torch.Dockerfile -t tr2-torch CONTEXT
#   docker run --rm --gpus all -v DATA:/data:ro -e TR2_DATA=/data tr2-torch \
#       --side torch --model nanogpt --dtype bfloat16 --mode default --steps 400
#
# TORCH_SPEC pins torch (tr2.footprint passes the version it measured); TORCH_INDEX_URL, where set,
# names the wheel index torch comes from (a CPU card's image takes the CPU-only wheel: set the
# environment variable TR2_TORCH_INDEX_URL for tr2.footprint). COMPILER is the C compiler the
# compiled modes need (Triton's launchers on a GPU: gcc; Inductor's C++ on a CPU: g++); empty
# for an image that runs eager only.
ARG PYTHON_VERSION=3.12
FROM python:${PYTHON_VERSION}-slim

ARG TORCH_SPEC=torch
ARG TORCH_INDEX_URL=
ARG COMPILER=gcc

RUN if [ -n "$COMPILER" ]; then \
        apt-get update && apt-get install -y --no-install-recommends $COMPILER libc6-dev \
        && rm -rf /var/lib/apt/lists/*; \
    fi
RUN pip install --no-cache-dir ${TORCH_INDEX_URL:+--index-url "$TORCH_INDEX_URL"} "$TORCH_SPEC" \
    && pip install --no-cache-dir numpy pyyaml \
    && find /usr/local/lib -depth -type d -name __pycache__ -exec rm -rf '{}' +

COPY lib/tr2 /opt/tr2/lib/tr2
COPY params/models.yaml /opt/tr2/params/models.yaml
ENV PYTHONPATH=/opt/tr2/lib PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
WORKDIR /opt/tr2
ENTRYPOINT ["python", "-u", "-m", "tr2.train"]

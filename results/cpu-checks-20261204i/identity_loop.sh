#!/bin/bash
# $1 = worker id; runs the tiny torch training repeatedly, keeping each distinct output
cd /work/main
for i in $(seq 1 150); do
  PAD=$(head -c $((RANDOM % 5000)) /dev/zero | tr '\0' x)
  rm -f /tmp/flake/w$1.jsonl; env TR2_PAD=$PAD .venv/bin/python -u -m tr2.train --side torch --model tiny --dtype float32 --device cpu --steps 12 --seed 1337 --eval-interval 10 --log-interval 10 --eval-iters 2 --metrics /tmp/flake/w$1.jsonl >/dev/null 2>&1
  s=$(md5sum < /tmp/flake/w$1.jsonl | cut -c1-32)
  echo "$s" >> /tmp/flake/md5s.txt
  [ -f /tmp/flake/$s.jsonl ] || cp /tmp/flake/w$1.jsonl /tmp/flake/$s.jsonl
done

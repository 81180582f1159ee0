"""A small tape for the backward pass.

During the forward pass each operation wraps its result in a `Node` and pushes a closure that, run
later, takes the gradient of that result and passes gradients on to its inputs' nodes.
`backward(root, seed)` seeds the root's gradient and runs the closures newest first. A node used
twice (the residual stream feeds both a block and the next residual add) receives a gradient from
each use; `accumulate` adds them, through the backend (so no array arithmetic happens here and the
same code runs on the GPU), into a fresh array: gradients handed over are never modified in place.
"""
from __future__ import annotations

from typing import Callable


class Node:
    """One forward value and, during backward, the gradient flowing into it."""
    __slots__ = ("value", "grad")

    def __init__(self, value):
        self.value = value
        self.grad = None


class Tape:
    def __init__(self, add: Callable):
        self._add = add  # (a, b) -> a + b, a fresh array
        self._closures: list = []
        self.recording = False

    def start(self, recording: bool) -> None:
        """Forget any previous pass; record this one's closures only when `recording`."""
        self._closures = []
        self.recording = recording

    def push(self, closure: Callable[[], None]) -> None:
        if self.recording:
            self._closures.append(closure)

    def accumulate(self, node: Node, grad) -> None:
        node.grad = grad if node.grad is None else self._add(node.grad, grad)

    @staticmethod
    def take(node: Node):
        """The node's gradient, released from the node (its memory goes when the consumer is done)."""
        grad, node.grad = node.grad, None
        if grad is None:
            raise RuntimeError("backward reached a value that received no gradient")
        return grad

    def backward(self, root: Node, seed) -> None:
        if not self._closures:
            raise RuntimeError("backward() without a recorded forward pass (training=True)")
        root.grad = seed
        closures, self._closures = self._closures, []
        while closures:
            closures.pop()()  # newest first; each closure and what it holds is dropped once run
        self.recording = False

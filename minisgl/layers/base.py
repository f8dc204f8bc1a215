"""`BaseOP`: a layer is plain tensors plus child layers; its state dict is read off its attributes
(chapter 04). No nn.Module machinery: inference needs no autograd, hooks or buffers. Public tensor
attributes are weights, public `BaseOP` / `OPList` attributes are children, and names starting with
`_` are private (caches, tied references). The dotted names match Hugging Face checkpoints after
the loader's q/k/v and gate/up merges.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Generic, TypeVar

import torch


def is_weight(value: object) -> bool:
    """A tensor, or an object standing in for one: anything with a `shape` that is not a layer (a
    device plug-in may swap a weight for its own form, e.g. the CPU's 4-bit codes, minisgl/cpu/)."""
    return isinstance(value, torch.Tensor) or (hasattr(value, "shape") and not isinstance(value, BaseOP))


class BaseOP:
    """Base of every layer and model: state dict derived from public attributes."""

    def named_children(self) -> Iterator[tuple[str, BaseOP]]:
        for name, value in vars(self).items():
            if not name.startswith("_") and isinstance(value, BaseOP):
                yield name, value

    def walk(self) -> Iterator[BaseOP]:
        """This op and every op below it, depth first."""
        yield self
        for _, child in self.named_children():
            yield from child.walk()

    def state_dict(self, prefix: str = "") -> dict[str, torch.Tensor]:
        """Every weight of this op and its children, by dotted name."""
        state = {prefix + name: value for name, value in vars(self).items()
                 if not name.startswith("_") and is_weight(value)}
        for name, child in self.named_children():
            state.update(child.state_dict(f"{prefix}{name}."))
        return state

    def set_weight(self, dotted_name: str, tensor: torch.Tensor) -> None:
        """Replace the weight at `dotted_name` (e.g. `layers.3.mlp.down_proj.weight`)."""
        owner_path, _, attr = dotted_name.rpartition(".")
        owner: BaseOP | None = self
        for part in owner_path.split(".") if owner_path else []:
            owner = dict(owner.named_children()).get(part)
            if owner is None:
                raise KeyError(f"unexpected weight {dotted_name!r}: no layer at {part!r}")
        current = getattr(owner, attr, None)
        if not is_weight(current) or attr.startswith("_"):
            raise KeyError(f"unexpected weight {dotted_name!r}")
        if current.shape != tensor.shape:
            raise ValueError(f"weight {dotted_name!r} has shape {tuple(tensor.shape)}, "
                             f"this rank expects {tuple(current.shape)}")
        setattr(owner, attr, tensor)


OP = TypeVar("OP", bound=BaseOP)


class OPList(BaseOP, Generic[OP]):
    """A list of layers whose state-dict names are their indices: `layers.0.…`, `layers.1.…`."""

    def __init__(self, ops: Sequence[OP]) -> None:
        self._ops = list(ops)

    def __getitem__(self, index: int) -> OP:
        return self._ops[index]

    def __iter__(self) -> Iterator[OP]:
        return iter(self._ops)

    def __len__(self) -> int:
        return len(self._ops)

    def named_children(self) -> Iterator[tuple[str, BaseOP]]:
        for index, op in enumerate(self._ops):
            yield str(index), op

"""Fold kokoro's weight normalization into plain weights before export.

kokoro wraps most convolutions in ``torch.nn.utils.weight_norm``, whose forward pre-hook
recomputes ``g * v / ||v||`` on every call.  Exported as is, that norm is recomputed at
every run of the compiled module; folded once, the module holds ordinary weights.
"""

from __future__ import annotations

import copy

import torch
from torch import nn
from torch.nn.utils import remove_weight_norm
from torch.nn.utils.weight_norm import WeightNorm


def fold_weight_norm(module: nn.Module) -> nn.Module:
    """A deep copy of ``module`` with every weight_norm hook folded into its weight."""
    # The hook caches the last weight it computed; one computed with autograd on is not a
    # graph leaf and cannot be deep-copied.  Recomputing it without autograd changes no value.
    with torch.no_grad():
        for sub in module.modules():
            for hook in sub._forward_pre_hooks.values():
                if isinstance(hook, WeightNorm):
                    setattr(sub, hook.name, hook.compute_weight(sub))
    module = copy.deepcopy(module)
    for sub in module.modules():
        for hook in list(sub._forward_pre_hooks.values()):
            if isinstance(hook, WeightNorm):
                remove_weight_norm(sub, hook.name)
    return module

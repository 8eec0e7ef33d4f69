"""A thinc ``PyTorchShim`` that shows the torch module it wraps.

Thinc keeps a shim's module private; the glue and the scripts that need the module
(the biLM of an ElmoModel, the ScalarMix of a listener) ask for it through
``torch_module`` instead of reaching into the shim.
"""
from typing import Optional

from thinc.api import Model, PyTorchShim
from torch import nn


class TorchModuleShim(PyTorchShim):
    @property
    def module(self) -> nn.Module:
        """The wrapped torch module (replaced when the shim is deserialized)."""
        return self._model


def torch_module(model: Model) -> Optional[nn.Module]:
    """The torch module of a thinc node built on a ``TorchModuleShim`` (None otherwise)."""
    for shim in model.shims:
        if isinstance(shim, TorchModuleShim):
            return shim.module
    return None

"""The listener bookkeeping of the ``elmo`` component: the contract spaCy's
``Language._link_components`` and ``Language.replace_listeners`` expect of an upstream
component (``listener_map``, ``listeners``, ``listening_components``, ``add_listener``,
``remove_listener``, ``find_listeners``), as spaCy's ``Tok2Vec`` has it."""
from typing import Any, Dict, List, Optional

from thinc.api import Model

from .bilm import ElmoBiLM
from .layers.listener import ElmoListener


class ListenerHost:
    """Mixin for ``Elmo``: it provides ``name``, ``cfg["store_layers"]``, ``bilm`` and the
    ``listener_map`` (component name -> its ``ElmoListener`` nodes)."""

    name: str
    cfg: Dict[str, Any]
    listener_map: Dict[str, List[ElmoListener]]
    bilm: Optional[ElmoBiLM]  # a property of the component

    @property
    def listeners(self) -> List[ElmoListener]:
        return [m for c in self.listening_components for m in self.listener_map[c]]

    @property
    def listening_components(self) -> List[str]:
        return list(self.listener_map.keys())

    def add_listener(self, listener: ElmoListener, component_name: str) -> None:
        if not self.cfg["store_layers"]:
            raise ValueError(
                f"elmo: component '{component_name}' listens to '{self.name}', which has "
                "store_layers = false; listeners read doc._.elmo at prediction time."
            )
        self.listener_map.setdefault(component_name, [])
        if listener not in self.listener_map[component_name]:
            self.listener_map[component_name].append(listener)
        self._set_listener_width(listener)

    def remove_listener(self, listener: ElmoListener, component_name: str) -> bool:
        if listener in self.listener_map.get(component_name, []):
            self.listener_map[component_name].remove(listener)
            if not self.listener_map[component_name]:
                del self.listener_map[component_name]
            return True
        return False

    def find_listeners(self, component: Any) -> None:
        names = ("*", self.name)
        if isinstance(getattr(component, "model", None), Model):
            for node in component.model.walk():
                if isinstance(node, ElmoListener) and node.upstream_name in names:
                    self.add_listener(node, component.name)

    def _set_listener_width(self, listener: ElmoListener) -> None:
        bilm = self.bilm
        if bilm is None:
            return
        if listener.n_layers != bilm.n_layers:
            raise ValueError(
                f"elmo: a listener mixes n_layers = {listener.n_layers}, but the biLM has {bilm.n_layers} layers"
            )
        listener.set_dim("nO", bilm.output_dim, force=True)


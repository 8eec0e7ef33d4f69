"""Thinc glue: the wrapped biLM (``ElmoModel.v1``) and the listener with its scalar mix."""
from .elmo_model import build_elmo_model_v1, get_bilm, set_bilm
from .listener import ElmoListener, build_elmo_listener_v1, get_scalar_mixes

__all__ = ["build_elmo_model_v1", "build_elmo_listener_v1", "ElmoListener", "get_bilm", "get_scalar_mixes", "set_bilm"]

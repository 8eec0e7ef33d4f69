"""Small helpers shared by the library's parts (no spaCy, Thinc or torch here)."""
from .atomic import atomic_path, atomic_write_bytes, atomic_write_text

__all__ = ["atomic_path", "atomic_write_bytes", "atomic_write_text"]

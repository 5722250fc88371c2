"""SGLang 0.5.x HTTP simulator for GPU-less CI: ``python -m harness.sim --model-path M ...``.

``SimModel`` (pure timing/acceptance model) is importable without starting anything.
"""

from harness.sim.model import SimModel

__all__ = ["SimModel"]

"""The compile targets of ``cinnlite.compile``, one :class:`~cinnlite.backends.base.Backend` each.

``registry.py`` names them (``BACKENDS``, ``get_backend``); ``base.py`` holds the interface and
the state a compile carries from stage to stage; ``cpu.py``, ``cuda.py`` and ``cuda_emu.py`` are
the targets, the last two sharing the GPU half in ``gpu.py``.
"""

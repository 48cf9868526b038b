"""Engine packages: everything that knows one serving engine, behind the harness's target seam.

An engine package holds its layout (which files a target loads), its shims
(faithful stand-ins for the engine names it does not load), the call forms of
its functions, its adapter (a ``Target``) and its payload-parser fuzz targets,
and exposes one ``ENGINE``, an ``Engine`` (``mmharness.targets.engine``: its
name, spec forms and fuzz targets), registered in the ``mmharness.engines``
entry-point group (``pyproject.toml``). Nothing outside its package names the engine.
"""

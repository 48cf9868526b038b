"""Engine packages: everything that knows one serving engine, behind the harness's target seam.

An engine package holds its layout (which files a target loads), its shims
(faithful stand-ins for the engine names it does not load), the call forms of
its functions, its adapter (a ``Target``) and its payload-parser fuzz targets,
and exposes ``SPEC_FORMS`` (``mmharness.targets.specs``) and ``FUZZ_TARGETS``.
Nothing outside its package names the engine.
"""

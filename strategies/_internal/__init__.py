"""Implementation of the ``strategies`` facade; import from ``strategies``, not from here."""

"""mmharness: property-based tests for the multimodal scheduling rules of LLM serving engines.

Importing this package must stay cheap and must never import torch: the CLI's
``--help``, the strategies and the payload parser all run without it.
"""

__version__ = "0.1.0"

"""The toy engine's one rule, as an engine's own code would hold it: R1, a request's chunk."""


def embedding_chunk(embedding, prefix_len, extend_len, offsets):
    """The rows of the placeholder positions in ``[prefix_len, prefix_len + extend_len)``, in position
    order, and how many positions lie before the window's start and before its end."""
    positions = [p for start, end in offsets for p in range(start, end + 1)]
    low, high = prefix_len, prefix_len + extend_len
    inside = [k for p, k in sorted((p, k) for k, p in enumerate(positions)) if low <= p < high]
    flat = embedding.reshape(-1, embedding.shape[-1])
    return flat[inside], sum(p < low for p in positions), sum(p < high for p in positions)

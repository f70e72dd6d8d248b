"""``escalation bench``: one module per scenario (drain, precision, idle, enqueue, scale)
plus shared machinery in ``common``. See docs/performance.md."""

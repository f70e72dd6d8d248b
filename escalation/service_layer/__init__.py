"""Use cases, one module each: enqueue, cancel, fire (worker batch), status."""

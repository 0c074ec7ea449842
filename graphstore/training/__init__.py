"""Training building blocks: losses and ranking metrics (the trainer itself lands with issue 4)."""

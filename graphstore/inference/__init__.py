"""The default inferencer: embeds every node type of a trained model."""

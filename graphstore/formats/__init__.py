"""What a run writes and reads back: the shard format (shards/), the embeddings format, the run folder layout and run ids. Imports graphstore.runtime and graphstore.io."""

"""The default trainer (``trainer.py``, ``python -m components.train``) and its parts: typed args,
``Job`` (dataset access per supervision type), batches and epochs, the encoder, losses,
evaluation and ranking metrics."""

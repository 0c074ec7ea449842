"""Commands beside the pipeline: the dataset generator, the stack doctor, the MovieLens importer."""

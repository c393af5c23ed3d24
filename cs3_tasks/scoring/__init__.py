"""scoring what a model produced: records, protocols, pipeline, resumable store, summaries."""

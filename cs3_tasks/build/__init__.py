"""building the dataset: TTS, ASR QC, parquet and card; offline voices and LLM."""

"""The enhancement recipe of the CS3-Bench paper: code-switching training data (build_data, construct,
mixing), Chain of Recognition and Keyword Highlighting (transforms), LoRA training (train, model) and
loading a trained adapter at inference (adapter). Entry point: ``cs3-bench recipe {build-data,train}``."""

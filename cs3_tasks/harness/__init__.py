"""The lm-eval glue below the pipeline: the start-up hook, the speech-response protocol, data parallelism."""

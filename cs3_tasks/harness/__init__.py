"""the lm-eval glue: start-up hook, speech responses, data parallelism, eval and demo."""

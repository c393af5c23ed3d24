"""lm-eval task configs for CS3-Bench (shipped in the wheel as cs3_tasks.task_configs)."""

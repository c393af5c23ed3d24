"""Worker programs that run a speech-to-speech model in its own Python environment.

Each module is started by ``cs3_tasks.models.worker`` with the model's Python (``python=`` model_arg) and
imports only the standard library, ``workerlib`` and that model's official code; nothing from cs3_tasks.
"""

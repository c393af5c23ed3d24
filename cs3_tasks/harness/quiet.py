"""What lm-eval prints that does not concern a user of the cs3 tasks, kept out of what they read.

- lm-eval warns, for every task with a ``custom_dataset``, that "Custom kwargs can be passed to --metadata":
  advice about its own tasks' arguments. Ours read ``--metadata`` already (docs/lm-eval.md), so the notice is
  dropped for our tasks (`install_log_filter`, from the start-up hook and our own runs); other tasks keep it.
- In our own lm-eval runs (``cs3-bench demo``, `cli.evaluate.evaluate_outputs`), `quiet_lm_eval` also turns
  off the bar lm-eval draws while it builds each task's requests (instant for ours: one bar per task, not a
  stage the user waits on), and runs lm-eval's ``git describe`` with its stderr dropped ("fatal: not a git
  repository" where the current folder is not one); the hash it records is unchanged.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import subprocess
from collections.abc import Callable, Iterator

CUSTOM_KWARGS_NOTICE = "Custom kwargs can be passed to `--metadata`"
TASK_LOGGER = "lm_eval.api.task"


class OurTasksNotice(logging.Filter):
    """Drops lm-eval's custom-kwargs notice when ``is_ours`` says the task it names is one of ours."""

    def __init__(self, is_ours: Callable[[str], bool]):
        super().__init__()
        self.is_ours = is_ours

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return CUSTOM_KWARGS_NOTICE not in message or not self.is_ours(message.split(":", 1)[0])


def install_log_filter(is_ours: Callable[[str], bool]) -> None:
    """Adds the filter to lm-eval's task logger, once per process."""
    logger = logging.getLogger(TASK_LOGGER)
    if not any(isinstance(f, OurTasksNotice) for f in logger.filters):
        logger.addFilter(OurTasksNotice(is_ours))


def quiet_git_commit_hash() -> str | None:
    """lm-eval's ``get_git_commit_hash``, with git's own error message dropped."""
    from lm_eval.loggers.utils import get_commit_from_path

    try:
        described = subprocess.check_output(["git", "describe", "--always"], stderr=subprocess.DEVNULL)
        return described.strip().decode()
    except (subprocess.CalledProcessError, FileNotFoundError):
        return get_commit_from_path(os.getcwd())


@contextlib.contextmanager
def quiet_lm_eval(is_ours: Callable[[str], bool]) -> Iterator[None]:
    """Within: lm-eval's request-building bars off, its ``git describe`` quiet, the notice filtered."""
    from unittest import mock

    import lm_eval.api.task
    import lm_eval.evaluator
    from tqdm import tqdm

    install_log_filter(is_ours)
    silent_bar = functools.partial(tqdm, disable=True)
    with (
        mock.patch.object(lm_eval.api.task, "tqdm", silent_bar),
        mock.patch.object(lm_eval.evaluator, "get_git_commit_hash", quiet_git_commit_hash),
    ):
        yield

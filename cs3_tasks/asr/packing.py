"""Packing short clips into one 30 s Whisper window and splitting its segments back (pure: no model).

Whisper's encoder costs as much for 2 s of speech as for 30, so in the opt-in "packed" mode several clips
share one window with silence between them (pack_windows); the window is beam-searched with timestamps and
its segments are split back to the clips by time (split_window). The model calls are in
cs3_tasks.asr.faster_whisper.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

# Packing settings were chosen with benchmarks/belle_asr_cer.py (results in README): shorter gaps let
# Whisper merge neighbouring clips; many 1-2 s clips in one window tend to merge too, hence the cap.
PACK_GAP_SECONDS = 1.5  # silence between packed clips
PACK_WINDOW_SECONDS = 26.0  # audio per packed window, leading silence and gaps included
PACK_MAX_CLIPS = 6
# Only clips whose language Whisper detects with at least this probability are packed. Low confidence means
# audio Whisper finds hard (e.g. unintelligible synthetic speech), where packed segments merge or loop.
PACK_MIN_LANGUAGE_PROBABILITY = 0.8
PACK_WINDOWS_PER_CALL = 8  # windows encoded and beam-searched together
PACK_ROUNDS = 2  # unresolved clips are packed once more, by language, with other neighbours


@dataclass(frozen=True)
class PlacedClip:
    """Clip ``index`` (of the caller's list) at [start, end) seconds of a packed window."""

    index: int
    start: float
    end: float


def pack_windows(
    durations: Sequence[float],
    indices: Sequence[int] | None = None,
    window_seconds: float = PACK_WINDOW_SECONDS,
    gap_seconds: float = PACK_GAP_SECONDS,
    max_clips: int = PACK_MAX_CLIPS,
) -> list[list[PlacedClip]]:
    """Greedy packing, in order: half a gap of silence, then clip, gap, clip, gap... per window.

    A clip that does not fit in a window even alone is left out (it is decoded on its own).
    """
    windows: list[list[PlacedClip]] = []
    current: list[PlacedClip] = []
    offset = gap_seconds / 2
    for i in indices if indices is not None else range(len(durations)):
        duration = durations[i]
        if gap_seconds / 2 + duration > window_seconds:
            continue
        if current and (offset + duration > window_seconds or len(current) == max_clips):
            windows.append(current)
            current, offset = [], gap_seconds / 2
        current.append(PlacedClip(i, offset, offset + duration))
        offset += duration + gap_seconds
    if current:
        windows.append(current)
    return windows


def split_window(
    tokens: Sequence[int],
    clips: Sequence[PlacedClip],
    timestamp_begin: int,
    eot: int,
    seconds_per_timestamp: float = 0.02,
) -> tuple[dict[int, list[int]], set[int]]:
    """Assign the segments Whisper decoded in a packed window to its clips.

    A segment is the text between two timestamp tokens. It belongs to the clip it overlaps by more
    than 0.25 s or by half that clip's length. Returns (text tokens per clip index, unresolved clip
    indices). A clip is unresolved, and decoded again, when a segment overlaps it and another clip
    (Whisper merged them), a segment lies in the silence next to it, the window ends in text after
    its last timestamp that may be its, or no text was assigned to it (Whisper skipped it, or it is
    silent: the per-clip path applies the no-speech rule).
    """

    def counts(overlap: float, clip: PlacedClip) -> bool:
        return overlap > min(0.25, 0.5 * (clip.end - clip.start))

    texts: dict[int, list[int]] = {clip.index: [] for clip in clips}
    unresolved: set[int] = set()
    last: float | None = None
    text: list[int] = []
    for token in tokens:
        if token >= timestamp_begin:
            now = (token - timestamp_begin) * seconds_per_timestamp
            if text and last is not None:
                owners = [clip for clip in clips if counts(min(now, clip.end) - max(last, clip.start), clip)]
                if len(owners) == 1:
                    texts[owners[0].index].extend(text)
                else:  # merged clips, or text in a gap: the clips around it are redone
                    unresolved.update(clip.index for clip in owners or _near(clips, last, now))
            text, last = [], now
        elif token < eot:
            text.append(token)
    if text:  # text after the last timestamp, not closed: any clip from there on may be unfinished
        since = last if last is not None else 0.0
        unresolved.update(clip.index for clip in clips if clip.end > since)
    unresolved.update(index for index, assigned in texts.items() if not assigned)
    return {index: assigned for index, assigned in texts.items() if index not in unresolved}, unresolved


def _near(clips: Sequence[PlacedClip], start: float, end: float) -> list[PlacedClip]:
    """The clips ending just before or starting just after [start, end]."""
    before = [clip for clip in clips if clip.end <= start + 1e-9]
    after = [clip for clip in clips if clip.start >= end - 1e-9]
    return [*before[-1:], *after[:1]]

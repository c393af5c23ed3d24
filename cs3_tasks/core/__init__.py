"""the shared ground: text, language pairs, pure metrics, audio I/O, caches, the sets."""

"""Safe input and output, below every layer: crash-safe atomic writes and the one JSON
writer (``atomic_io``), advisory folder locks (``folder_lock``), text made safe for CSV,
HTML and terminals (``output_safety``), and secrets removed from anything we print or
store (``redact``). Imports nothing of promptrobust but ``engine.errors``."""

"""Safe input and output, below every layer: crash-safe atomic writes and the one JSON writer
(``atomic_io``), advisory folder locks (``folder_lock``), text made safe for CSV, HTML and
terminals (``output_safety``), and secrets removed from anything we print or store
(``redact``). Imports nothing of promptrobust but ``engine.errors``.

The names below are the public surface a front end uses (the CLI imports this package, not
its modules): a terminal stream without escape sequences, the environment's refusals (a full
disk, a read-only folder) as one line with their exit code, and redaction.
"""

from promptrobust.engine.safe_io.atomic_io import EXIT_ENVIRONMENT, as_output_error, describe_os_error
from promptrobust.engine.safe_io.output_safety import SafeStream
from promptrobust.engine.safe_io.redact import redact_text, scrub

__all__ = ["EXIT_ENVIRONMENT", "SafeStream", "as_output_error", "describe_os_error", "redact_text", "scrub"]

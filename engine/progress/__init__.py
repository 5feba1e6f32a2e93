"""Progress of long work: events the engine emits, and who hears them.

The engine never draws anything. Long steps emit small events (``events``) into
the *current reporter* (a context variable, so concurrent sweep jobs and worker
threads each see the reporter of the call that started them):

- ``phase(text)``: a new step began (converting the model, loading it, ranking
  prompts, attack X on prompt Y); ``phase_done()``: its work is over;
  ``during(text)``: a step inside the phase (loading the model), after which it resumes;
- ``planned(n)``: n more model requests are expected (negative: fewer than
  announced, e.g. early stopping ended a candidate); ``reserve``/``reserve_pool``
  announce a phase's (a sweep's rankings') requests up front;
- ``search_step(...)``: where an attack's search is (word i of n, candidates
  tried, its budget, best score so far);
- ``jobs(done, total, shapes=...)`` and ``job(label, shape)``: sweep jobs, what
  each is, when each starts and ends;
- ``work(label, done, total, unit)``: a step that is not model requests
  (converting a model: bytes; word importance: forward passes);
- ``watch(stats)``: a scheduler whose counters (answered, cache hits, sent) are
  polled for requests done;
- ``fallback(key, message)``: a substitute resource was used (said once per
  reporter, i.e. once per run); ``library_warning(key, message)`` likewise for a
  third-party warning that may matter (``library_warnings`` routes Python's
  warnings while a reporter is installed: said in our words, noted, or silent).

``state.ProgressState`` folds the events and counters into a ``Status``:
requests done of the expected total (``total``: planned, corrected by early
stopping, a search's budget-capped projection, a sweep's jobs predicted from
finished jobs of the same shape), cache hits apart, the rate of requests
actually sent and an ETA measured between arrivals of answers (``rate``: a
batch backend's whole-batch answers give a rate at once), and a step's own
progress with its own ETA. ``display`` makes it one plain line and
``StreamReporter`` writes phase lines at once and a status line every
``every`` seconds (a heartbeat thread, so it speaks even while the event loop
is busy loading a model); the CLI's renderer (``cli/progress.py``) builds on
it. The Python API installs a ``StreamReporter`` on stderr by default
(``progress=False`` turns it off). ``recording`` writes a run's timeline to a
file (``$PRE_PROGRESS_RECORD``) and plays one back.

Attack code reports without importing the engine: its search calls the
scorer's optional ``search_step`` hook, and resource fallbacks are logged on
the ``promptrobust.fallback`` logger, which this package forwards.
"""

from promptrobust.engine.progress.display import (
    EVERY_ENV,
    HEARTBEAT_SECONDS,
    StreamReporter,
    api_reporter,
    cell_width,
    counted,
    format_duration,
    format_status,
    format_step,
    format_work,
    heartbeat_seconds,
    reporting,
)
from promptrobust.engine.progress.events import (
    FALLBACK_LOGGER,
    Counters,
    Event,
    Fallback,
    JobEnded,
    Jobs,
    JobShape,
    JobStarted,
    LibraryWarning,
    NullReporter,
    Phase,
    PhaseDone,
    PhaseEnd,
    Planned,
    Reporter,
    SearchStep,
    Watch,
    Work,
    active,
    current,
    during,
    fallback,
    install_fallback_forwarding,
    job,
    jobs,
    library_warning,
    phase,
    phase_done,
    planned,
    reserve,
    reserve_pool,
    scope,
    search_step,
    use,
    watch,
    work,
)
from promptrobust.engine.progress.recording import RECORD_ENV, Recorder, replay
from promptrobust.engine.progress.state import ProgressState, Status, WorkStatus

install_fallback_forwarding()

__all__ = [
    "EVERY_ENV", "FALLBACK_LOGGER", "HEARTBEAT_SECONDS", "RECORD_ENV", "Counters", "Event", "Fallback", "JobEnded",
    "JobShape", "JobStarted", "Jobs", "LibraryWarning", "NullReporter", "Phase", "PhaseDone", "PhaseEnd", "Planned", "ProgressState",
    "Recorder", "Reporter", "SearchStep", "Status", "StreamReporter", "Watch", "Work", "WorkStatus", "active",
    "api_reporter", "cell_width", "counted", "current", "during", "fallback", "format_duration", "format_status", "format_step",
    "format_work", "heartbeat_seconds", "install_fallback_forwarding", "job", "jobs", "library_warning", "phase", "phase_done",
    "planned", "replay", "reporting", "reserve", "reserve_pool", "scope", "search_step", "use", "watch", "work",
]

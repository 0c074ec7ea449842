"""Run one Vertex AI CustomJob to its end, and never leave it running behind us.

:func:`run_custom_job` creates the job through a ``JobServiceClient`` (the real
``aiplatform_v1`` client; tests give it one whose service is a local fake), reports its resource
name at once (``on_created``: the stage record names it before anything else happens), then polls
it until it ends. The rules, in the order they apply:

- SIGTERM or SIGINT (what Vertex AI sends the pipeline task when the pipeline is cancelled or the
  task's pod goes away) sets ``stop`` (:func:`stop_on_signals`); the job is then cancelled,
  :attr:`Polling.cancel_wait_s` is spent waiting for the cancel to register (state
  ``JOB_STATE_CANCELLING`` or ``JOB_STATE_CANCELLED``), and :class:`CustomJobInterrupted` is raised
  (exit 130). A signal that arrives while the job is being created cancels it as soon as the
  create call returns its name.
- A failed poll (any error of the client: network, quota, 5xx) is retried after a backoff that
  doubles from :attr:`Polling.backoff_first_s` up to :attr:`Polling.backoff_max_s`. After
  :attr:`Polling.retries` consecutive failures the job is cancelled (as above) and
  :class:`CustomJobFailed` says so, naming the job: a job is never orphaned silently.
- A failed create call may still have created the job (e.g. a deadline hit after the service
  accepted it): the jobs carrying this launch's own ``graphstore_launch`` label are looked up and
  cancelled before :class:`CustomJobFailed` is raised.
- ``JOB_STATE_SUCCEEDED`` returns the job; any other end state raises :class:`CustomJobFailed`
  with Vertex AI's error message.

When cancelling itself fails, the error says so and gives the command that cancels the job.
Nothing here imports torch (pipeline/).
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from graphstore.runtime.errors import GraphstoreError, RuntimeFailure

log = logging.getLogger("pipeline.custom_jobs")

LAUNCH_LABEL = "graphstore_launch"
"""A label unique to one :func:`run_custom_job` call, to find a job whose create call failed."""
_ENDED = ("JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED", "JOB_STATE_CANCELLED", "JOB_STATE_EXPIRED",
          "JOB_STATE_PARTIALLY_SUCCEEDED")
_CANCEL_REGISTERED = ("JOB_STATE_CANCELLING", *_ENDED)


@dataclass(frozen=True, kw_only=True, slots=True)
class Polling:
    """How a CustomJob is watched. Defaults suit jobs of minutes to days; tests shorten them."""

    interval_s: float = 30.0
    """Between two polls of a healthy job."""
    retries: int = 8
    """Consecutive failed polls tolerated; one more cancels the job (the defaults wait 2, 4, ...,
    120, 120 s between them: about 6 minutes, plus each failed call's own time)."""
    backoff_first_s: float = 2.0
    backoff_max_s: float = 120.0
    cancel_wait_s: float = 30.0
    """After the cancel call: how long to wait for the job to show that the cancel registered."""
    rpc_timeout_s: float = 60.0
    """One call to the service."""

    def __post_init__(self) -> None:
        if min(self.interval_s, self.backoff_first_s, self.backoff_max_s, self.rpc_timeout_s) <= 0 \
                or self.retries < 0 or self.cancel_wait_s < 0:
            raise ValueError(f"Polling: times must be > 0 and retries >= 0, got {self}")

    def backoff_s(self, failures: int) -> float:
        """The wait after the ``failures``-th consecutive failed poll (1-based)."""
        return min(self.backoff_first_s * 2 ** (failures - 1), self.backoff_max_s)


class CustomJobFailed(RuntimeFailure):
    """The job failed, could not be created, or could not be watched (then it was cancelled)."""


class CustomJobInterrupted(GraphstoreError):
    """SIGTERM/SIGINT reached the task; the job was cancelled (exit 130)."""

    exit_code = 130


@contextlib.contextmanager
def stop_on_signals(stop: threading.Event) -> Iterator[list[str]]:
    """While inside, SIGTERM and SIGINT set ``stop`` (and are listed, by name, in the yielded
    list) instead of ending the process; the previous handlers come back on exit. Only the main
    thread can install handlers: elsewhere this does nothing."""
    received: list[str] = []
    if threading.current_thread() is not threading.main_thread():
        yield received
        return

    def on_signal(signum: int, _frame: object) -> None:
        received.append(signal.Signals(signum).name)
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield received
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _state(job: Any) -> str:
    return getattr(job.state, "name", str(job.state))


def _cancel_hint(name: str) -> str:
    parts = name.split("/")  # projects/P/locations/R/customJobs/ID
    region = parts[3] if len(parts) > 3 else "REGION"
    return f"gcloud ai custom-jobs cancel {parts[-1]} --region={region}"


class _Watch:
    """One job's watch: the client, the polling rules, the stop event."""

    def __init__(self, client: Any, polling: Polling, stop: threading.Event) -> None:
        self.client, self.polling, self.stop = client, polling, stop

    def cancel(self, name: str) -> str:
        """Cancel ``name`` and wait for it to register; a sentence saying what happened."""
        p, error = self.polling, None
        for attempt in range(1, 4):
            try:
                self.client.cancel_custom_job(name=name, timeout=p.rpc_timeout_s)
                error = None
                break
            except Exception as exc:  # noqa: BLE001 - any client error: try again, then report
                error = exc
                log.warning("cancel attempt=%d job=%s error=%s", attempt, name, exc)
                time.sleep(min(p.backoff_first_s * attempt, 5.0))
        if error is not None:
            return (f"cancelling it FAILED ({type(error).__name__}: {str(error)[:200]}); it may "
                    f"still be running: cancel it with `{_cancel_hint(name)}`")
        deadline, state = time.monotonic() + p.cancel_wait_s, "unknown"
        while True:
            try:
                state = _state(self.client.get_custom_job(name=name, timeout=p.rpc_timeout_s))
            except Exception as exc:  # noqa: BLE001
                log.warning("job=%s state unknown after cancel: %s", name, exc)
            if state in _CANCEL_REGISTERED or time.monotonic() >= deadline:
                break
            time.sleep(min(2.0, max(deadline - time.monotonic(), 0.0)))
        log.info("cancelled job=%s state=%s", name, state)
        if state in _CANCEL_REGISTERED:
            return f"it was cancelled (state {state})"
        return (f"the cancel was sent but not yet seen after {p.cancel_wait_s:g} s (state "
                f"{state}); check it with `gcloud ai custom-jobs describe {name}`")

    def interrupted(self, name: str, received: list[str]) -> CustomJobInterrupted:
        how = received[0] if received else "a stop request"
        return CustomJobInterrupted(f"interrupted by {how}: CustomJob {name}: {self.cancel(name)}")

    def poll(self, name: str, received: list[str]) -> Any:
        """Poll until the job ends (returned), or raise after a stop or too many failed polls."""
        p, failures, first_failure = self.polling, 0, 0.0
        wait_s = p.interval_s
        while True:
            if self.stop.wait(wait_s):
                raise self.interrupted(name, received)
            try:
                job = self.client.get_custom_job(name=name, timeout=p.rpc_timeout_s)
            except Exception as exc:  # noqa: BLE001 - a failed poll is retried, never fatal alone
                failures += 1
                first_failure = first_failure or time.monotonic()
                if failures > p.retries:
                    spent = time.monotonic() - first_failure
                    raise CustomJobFailed(
                        f"CustomJob {name}: {failures} polls in a row failed over {spent:.0f} s "
                        f"(last: {type(exc).__name__}: {str(exc)[:200]}); so as not to leave it "
                        f"running unwatched, {self.cancel(name)}") from None
                wait_s = p.backoff_s(failures)
                log.warning("poll job=%s failed=%d/%d retry_in_s=%.1f error=%s", name, failures,
                            p.retries, wait_s, str(exc)[:200])
                continue
            failures, first_failure, wait_s = 0, 0.0, p.interval_s
            state = _state(job)
            log.info("job=%s state=%s", name, state)
            if state in _ENDED:
                return job


def _find_launched(client: Any, parent: str, launch_id: str, timeout_s: float) -> list[str]:
    """Names of the jobs under ``parent`` carrying ``graphstore_launch=<launch_id>``."""
    jobs = client.list_custom_jobs(
        request={"parent": parent, "filter": f'labels.{LAUNCH_LABEL}="{launch_id}"'},
        timeout=timeout_s)
    return [j.name for j in jobs if j.labels.get(LAUNCH_LABEL) == launch_id]


def _create(client: Any, parent: str, job: Any, watch: _Watch) -> str:
    """Create ``job`` under a fresh launch label; its name. A failed create cancels whatever it
    may have created (module docs) and raises CustomJobFailed."""
    launch_id = uuid.uuid4().hex[:16]
    job.labels[LAUNCH_LABEL] = launch_id
    timeout_s = watch.polling.rpc_timeout_s
    try:
        return client.create_custom_job(parent=parent, custom_job=job, timeout=timeout_s).name
    except Exception as exc:  # noqa: BLE001 - any client error fails the stage, named
        reason = f"{type(exc).__name__}: {str(exc)[:300]}"
    try:
        found = _find_launched(client, parent, launch_id, timeout_s)
    except Exception as exc:  # noqa: BLE001
        raise CustomJobFailed(
            f"could not create the CustomJob {job.display_name} in {parent} ({reason}); nor list "
            f"jobs to check it was not created anyway ({type(exc).__name__}: {str(exc)[:200]}); "
            f"look for label {LAUNCH_LABEL}={launch_id}") from None
    done = [f"{name}: {watch.cancel(name)}" for name in found]
    raise CustomJobFailed(f"could not create the CustomJob {job.display_name} in {parent} "
                          f"({reason})" + (f"; it was created anyway, {'; '.join(done)}" if done
                                           else ""))


def run_custom_job(client: Any, parent: str, job: Any, *, on_created: Callable[[str], None],
                   polling: Polling = Polling(), stop: threading.Event | None = None) -> Any:
    """Create ``job`` (an ``aiplatform_v1.CustomJob``) under ``parent`` and watch it to its end
    (module docs); returns the ended job.

    ``on_created(name)`` runs right after the create call, before the first poll (a signal
    received meanwhile is acted on after it). Signals are handled only while this runs, and only
    in the main thread; ``stop`` lets a caller stop it too.

    Raises:
        CustomJobFailed: the job failed or expired, could not be created, or could not be watched
            (it was then cancelled); exit 1.
        CustomJobInterrupted: SIGTERM/SIGINT or ``stop``; the job was cancelled; exit 130.
    """
    stop = stop or threading.Event()
    watch = _Watch(client, polling, stop)
    with stop_on_signals(stop) as received:
        if stop.is_set():
            raise CustomJobInterrupted("interrupted before the CustomJob was created")
        name = _create(client, parent, job, watch)
        log.info("created job=%s display_name=%s", name, job.display_name)
        try:
            on_created(name)
        except BaseException as exc:  # the record could not be written: do not leave the job
            raise CustomJobFailed(f"CustomJob {name}: {type(exc).__name__}: {exc}; "
                                  f"{watch.cancel(name)}") from None
        if stop.is_set():
            raise watch.interrupted(name, received)
        ended = watch.poll(name, received)
    state = _state(ended)
    if state != "JOB_STATE_SUCCEEDED":
        message = getattr(getattr(ended, "error", None), "message", "") or "no error message"
        raise CustomJobFailed(f"CustomJob {name} ended {state}: {message[:2000]}")
    return ended

"""A fake Vertex AI JobService on a loopback gRPC port: the one stand-in our tests allow for the
service itself. The client is the real ``aiplatform_v1.JobServiceClient`` over an insecure
channel (:func:`client_for`), so requests go through the real messages, serialisation and errors.

CustomJobs live in memory. Their life is scripted by attributes a test may change at any time:

- ``create_error``: a gRPC code the create call answers with *after* storing the job (a deadline
  hit after the service accepted it), once;
- ``fail_gets``: the next this many get calls answer ``UNAVAILABLE``;
- ``cancel_error``: a gRPC code every cancel call answers with (the job stays as it is);
- ``gets_to_end`` / ``end_state``: a running job ends in ``end_state`` after this many gets
  (``None``: it runs until cancelled). A created job is PENDING; its first get makes it RUNNING;
  a cancel makes it CANCELLING and the next get CANCELLED.

Every call is appended to ``calls`` as ``(method, job name or parent, state after the call)``.
"""

from __future__ import annotations

import threading
from concurrent import futures
from typing import Any

import grpc
from google.cloud import aiplatform_v1
from google.cloud.aiplatform_v1.types import job_service
from google.protobuf import empty_pb2

SERVICE = "google.cloud.aiplatform.v1.JobService"
State = aiplatform_v1.JobState


class FakeJobService:
    """See the module docs. ``start()`` returns ``host:port``; ``stop()`` ends the server."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.jobs: dict[str, aiplatform_v1.CustomJob] = {}
        self.requests: list[aiplatform_v1.CustomJob] = []
        self.calls: list[tuple[str, str, str]] = []
        self.gets: dict[str, int] = {}
        self.create_error: grpc.StatusCode | None = None
        self.cancel_error: grpc.StatusCode | None = None
        self.fail_gets = 0
        self.gets_to_end: int | None = None
        self.end_state = State.JOB_STATE_SUCCEEDED
        self.server: grpc.Server | None = None

    # ---- the four methods ----------------------------------------------------------------
    def _create(self, request: job_service.CreateCustomJobRequest, context: Any) -> aiplatform_v1.CustomJob:
        with self.lock:
            job = aiplatform_v1.CustomJob(request.custom_job)
            self.requests.append(aiplatform_v1.CustomJob(request.custom_job))
            job.name = f"{request.parent}/customJobs/{1000 + len(self.jobs)}"
            job.state = State.JOB_STATE_PENDING
            self.jobs[job.name] = job
            self.calls.append(("create", job.name, job.state.name))
            error, self.create_error = self.create_error, None
        if error is not None:
            context.abort(error, "fake: deadline after the job was accepted")
        return job

    def _get(self, request: job_service.GetCustomJobRequest, context: Any) -> aiplatform_v1.CustomJob:
        with self.lock:
            job = self.jobs.get(request.name)
            if job is None:
                context.abort(grpc.StatusCode.NOT_FOUND, f"no job {request.name}")
            if self.fail_gets > 0:
                self.fail_gets -= 1
                self.calls.append(("get-failed", request.name, job.state.name))
                context.abort(grpc.StatusCode.UNAVAILABLE, "fake: service unavailable")
            n = self.gets[request.name] = self.gets.get(request.name, 0) + 1
            if job.state == State.JOB_STATE_PENDING:
                job.state = State.JOB_STATE_RUNNING
            elif job.state == State.JOB_STATE_CANCELLING:
                job.state = State.JOB_STATE_CANCELLED
            elif job.state == State.JOB_STATE_RUNNING and self.gets_to_end is not None \
                    and n > self.gets_to_end:
                job.state = self.end_state
                if self.end_state == State.JOB_STATE_FAILED:
                    job.error.message = "fake: replica workerpool0-0 exited with a non-zero status of 1"
            self.calls.append(("get", request.name, job.state.name))
            return aiplatform_v1.CustomJob(job)

    def _cancel(self, request: job_service.CancelCustomJobRequest, context: Any) -> empty_pb2.Empty:
        with self.lock:
            job = self.jobs.get(request.name)
            if job is None:
                context.abort(grpc.StatusCode.NOT_FOUND, f"no job {request.name}")
            if self.cancel_error is not None:
                self.calls.append(("cancel-failed", request.name, job.state.name))
                context.abort(self.cancel_error, "fake: cancel refused")
            if job.state in (State.JOB_STATE_PENDING, State.JOB_STATE_RUNNING):
                job.state = State.JOB_STATE_CANCELLING
            self.calls.append(("cancel", request.name, job.state.name))
        return empty_pb2.Empty()

    def _list(self, request: job_service.ListCustomJobsRequest,
              context: Any) -> job_service.ListCustomJobsResponse:
        with self.lock:  # the filter is ignored: callers re-check labels themselves
            jobs = [aiplatform_v1.CustomJob(j) for name, j in self.jobs.items()
                    if name.startswith(request.parent + "/")]
            self.calls.append(("list", request.parent, ""))
        return job_service.ListCustomJobsResponse(custom_jobs=jobs)

    # ---- the server ----------------------------------------------------------------------
    def start(self) -> str:
        def method(fn, request_type, response_type):
            return grpc.unary_unary_rpc_method_handler(
                fn, request_deserializer=request_type.deserialize,
                response_serializer=getattr(response_type, "serialize", None)
                or (lambda m: m.SerializeToString()))

        handler = grpc.method_handlers_generic_handler(SERVICE, {
            "CreateCustomJob": method(self._create, job_service.CreateCustomJobRequest,
                                      aiplatform_v1.CustomJob),
            "GetCustomJob": method(self._get, job_service.GetCustomJobRequest, aiplatform_v1.CustomJob),
            "CancelCustomJob": method(self._cancel, job_service.CancelCustomJobRequest, empty_pb2.Empty),
            "ListCustomJobs": method(self._list, job_service.ListCustomJobsRequest,
                                     job_service.ListCustomJobsResponse)})
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        self.server.add_generic_rpc_handlers((handler,))
        port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()
        return f"127.0.0.1:{port}"

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop(grace=1).wait(5)

    def methods(self) -> list[str]:
        with self.lock:
            return [c[0] for c in self.calls]


def client_for(address: str) -> aiplatform_v1.JobServiceClient:
    """The real JobServiceClient, talking to the fake at ``address`` without TLS."""
    from google.cloud.aiplatform_v1.services.job_service.transports import JobServiceGrpcTransport

    transport = JobServiceGrpcTransport(channel=grpc.insecure_channel(address))
    return aiplatform_v1.JobServiceClient(transport=transport)
